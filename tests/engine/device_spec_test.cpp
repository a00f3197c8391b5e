// --device specs: every accepted form, and a clear one-line refusal for each malformed one.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "engine/device_spec.h"

namespace clef {
namespace {

using engine::Device;
using engine::parse_device_spec;
using engine::resolve_devices;

std::string refusal(const std::string& spec) {
  try {
    parse_device_spec(spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(DeviceSpec, AcceptedForms) {
  auto cpu = parse_device_spec("cpu");
  EXPECT_EQ(cpu.device, Device::Cpu);
  EXPECT_EQ(cpu.indices, std::vector<int>{0});
  EXPECT_FALSE(cpu.all);

  auto cuda = parse_device_spec("cuda");  // cuda = cuda:0
  EXPECT_EQ(cuda.device, Device::Cuda);
  EXPECT_EQ(cuda.indices, std::vector<int>{0});

  EXPECT_EQ(parse_device_spec("cuda:3").indices, std::vector<int>{3});
  // Both list forms, in the order given.
  EXPECT_EQ(parse_device_spec("cuda:2,cuda:0,cuda:1").indices, (std::vector<int>{2, 0, 1}));
  EXPECT_EQ(parse_device_spec("cuda:0,1,3").indices, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(parse_device_spec("cuda:1,cuda:3,2").indices, (std::vector<int>{1, 3, 2}));

  auto all = parse_device_spec("cuda:all");
  EXPECT_EQ(all.device, Device::Cuda);
  EXPECT_TRUE(all.all);
}

TEST(DeviceSpec, MalformedSpecsAreRefusedNamingTheirFault) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"cuda:x", "'x' is not a device index"},
      {"cuda:0,cuda:0", "cuda:0 is listed twice"},
      {"cuda:1,0,1", "cuda:1 is listed twice"},
      {"cuda:", "an empty device index"},
      {"cuda:0,", "an empty device index"},
      {"cuda:0,,1", "an empty device index"},
      {"cuda:-1", "'-1' is not a device index"},
      {"cuda:+1", "'+1' is not a device index"},
      {"cuda: 1", "' 1' is not a device index"},
      {"cuda:1.5", "'1.5' is not a device index"},
      {"cuda:99999999999", "'99999999999' is not a device index"},
      {"cuda:all,cuda:1", "cuda:all cannot be combined with a list"},
      {"cuda:0,all", "cuda:all cannot be combined with a list"},
      {"cuda:0,gpu:1", "'gpu:1' is not a device index"},
      {"gpu", "unknown device"},
      {"", "unknown device"},
      {"CUDA:0", "unknown device"},
      {"0,1", "unknown device"},
      {"cpu:0", "cpu is one device"},
      {"cpu,cuda:0", "cpu is one device"},
  };
  for (const auto& [spec, why] : cases) {
    const std::string msg = refusal(spec);
    EXPECT_NE(msg.find("--device '" + spec + "': " + why), std::string::npos)
        << spec << " -> " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;  // one line
  }
}

TEST(DeviceSpec, ResolvesAgainstTheMachine) {
  EXPECT_EQ(resolve_devices(parse_device_spec("cuda:all"), 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(resolve_devices(parse_device_spec("cuda:1,0"), 2), (std::vector<int>{1, 0}));
  EXPECT_EQ(resolve_devices(parse_device_spec("cpu"), 0), std::vector<int>{0});
  // What one GPU allows: cuda:0 only.
  EXPECT_EQ(resolve_devices(parse_device_spec("cuda:0"), 1), std::vector<int>{0});
  EXPECT_EQ(resolve_devices(parse_device_spec("cuda:all"), 1), std::vector<int>{0});
  try {
    resolve_devices(parse_device_spec("cuda:1"), 1);
    ADD_FAILURE() << "cuda:1 accepted on a one-GPU machine";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--device cuda:1: this machine has 1 CUDA device (cuda:0)");
  }
  try {
    resolve_devices(parse_device_spec("cuda:0,cuda:5"), 4);
    ADD_FAILURE() << "cuda:5 accepted on a four-GPU machine";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--device cuda:5: this machine has 4 CUDA devices (cuda:0..cuda:3)");
  }
  // No usable device: nothing is refused here; engine creation fails with its own message.
  EXPECT_EQ(resolve_devices(parse_device_spec("cuda:2"), 0), std::vector<int>{2});
  EXPECT_EQ(resolve_devices(parse_device_spec("cuda:all"), 0), std::vector<int>{0});
}

TEST(DeviceSpec, Labels) {
  EXPECT_EQ(engine::device_label(Device::Cpu, 0), "cpu");
  EXPECT_EQ(engine::device_label(Device::Cuda, 7), "cuda:7");
}

}  // namespace
}  // namespace clef
