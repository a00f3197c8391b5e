// Whether the video tests can write with an FFmpeg encoder: missing is a failure under CI=true
// (scripts/setup.sh installs Debian's libavcodec59, which has them all), a printed skip elsewhere.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "support/video_encoder.h"

namespace clef::testsupport {

inline bool encoder_usable(const char* encoder) {
  if (have_encoder(encoder)) return true;
  const char* ci = std::getenv("CI");
  if (ci && std::string(ci) == "true")
    ADD_FAILURE() << "FFmpeg encoder " << encoder << " is missing (Debian's libavcodec59 has it)";
  else
    std::printf("FFmpeg encoder %s is missing: its cases are skipped\n", encoder);
  return false;
}

}  // namespace clef::testsupport
