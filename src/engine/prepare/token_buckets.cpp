#include "engine/prepare/token_buckets.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace clef::engine {
namespace {
constexpr int kMinStep = 8;          // below 512 tokens: 8-token steps (mean padding <= 4 tokens)
constexpr int kStepsPerOctave = 32;  // beyond: the step is 1/32 of the octave's start

int step_for(int T) {
  int octave = 1;
  while (octave <= T / 2) octave *= 2;  // largest power of two <= T
  return std::max(kMinStep, octave / kStepsPerOctave);
}
}  // namespace

int bucket_tokens(int T) {
  if (T <= 0) throw std::invalid_argument("bucket_tokens: T must be positive");
  if (T > (1 << 28))
    throw std::invalid_argument("bucket_tokens: T too large: " + std::to_string(T));
  const int step = step_for(T);
  return (T + step - 1) / step * step;
}

std::vector<int> all_buckets(int max_tokens) {
  std::vector<int> out;
  for (int T = 1; T <= max_tokens;) {
    const int b = bucket_tokens(T);
    out.push_back(b);
    T = b + 1;
  }
  return out;
}

}  // namespace clef::engine
