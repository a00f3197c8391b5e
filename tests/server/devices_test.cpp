// `serve --device`: a malformed or repeated device is a usage error (exit 2) before anything
// binds or loads; without a GPU, --device cuda:0 fails closed; /health lists the served devices and
// the per-engine /metrics series carry their device label. (With GPUs: tests/engine/cuda.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/device_spec.h"
#include "server_process.h"
#include "shared_server.h"

namespace clef::server_test {
namespace {

void expect_usage_error(const std::string& spec, const std::string& message) {
  ServerProcess srv({"--model", golden_model("tiny-r2"), "--device", spec});
  EXPECT_FALSE(srv.started());
  EXPECT_EQ(srv.wait_exit(30), 2) << srv.log();
  const std::string log = srv.log();
  EXPECT_NE(log.find(message), std::string::npos) << log;
  EXPECT_EQ(log.find("bound"), std::string::npos) << "bound before refusing:\n" << log;
  EXPECT_EQ(log.find("info load"), std::string::npos) << "loaded before refusing:\n" << log;
}

TEST(ServeDevices, RepeatedDeviceIsAUsageError) {
  expect_usage_error("cuda:0,cuda:0", "--device 'cuda:0,cuda:0': cuda:0 is listed twice");
  expect_usage_error("cuda:1,0,1", "--device 'cuda:1,0,1': cuda:1 is listed twice");
}

TEST(ServeDevices, MalformedDeviceIsAUsageError) {
  expect_usage_error("cuda:x", "--device 'cuda:x': 'x' is not a device index");
  expect_usage_error("gpu", "--device 'gpu': unknown device");
  expect_usage_error("cuda:0,", "--device 'cuda:0,': an empty device index");
}

TEST(ServeDevices, OneDeviceCommandsRefuseAList) {
  std::string out;
  // decide reads its request from stdin; the usage error comes first (exit 2, nothing on stdout).
  EXPECT_EQ(run_program({CLEF_BINARY, "decide", "--model", golden_model("tiny-r2"), "--device",
                         "cuda:0,cuda:1"},
                        "{}", &out),
            2);
  EXPECT_EQ(out, "");
  EXPECT_EQ(run_program({CLEF_BINARY, "profile", "--model", golden_model("tiny-r2"), "--device",
                         "cuda:all"},
                        "", &out),
            2);
}

// Without a usable GPU (or in a build without the CUDA backend) --device cuda:0 fails closed with
// the engine's own clear line, exit 1, never serving on the CPU instead.
TEST(ServeDevices, CudaWithoutAGpuFailsClosed) {
  if (engine::cuda_device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  for (const char* spec : {"cuda:0", "cuda:all", "cuda:0,cuda:1"}) {
    ServerProcess srv({"--model", golden_model("tiny-r2"), "--device", spec});
    EXPECT_FALSE(srv.started()) << spec;
    EXPECT_EQ(srv.wait_exit(60), 1) << spec << "\n" << srv.log();
    const std::string log = srv.log();
    EXPECT_NE(log.find("startup_failed"), std::string::npos) << log;
    const bool clear = log.find("this build has no CUDA backend") != std::string::npos ||
                       log.find("no usable CUDA device") != std::string::npos;
    EXPECT_TRUE(clear) << log;
    EXPECT_EQ(log.find("info listening"), std::string::npos) << log;
  }
}

TEST(ServeDevices, HealthListsTheDeviceAndMetricsLabelIt) {
  const int port = shared_port();
  auto h = http(port, "GET", "/health").json();
  ASSERT_TRUE(h.contains("devices")) << h.dump();
  ASSERT_EQ(h["devices"].size(), 1u) << h.dump();
  const auto& d = h["devices"][0];
  EXPECT_EQ(d["id"], "cpu");
  EXPECT_EQ(d["backend"], "cpu");
  EXPECT_EQ(d["device"], h["device"]);
  EXPECT_EQ(d["dtype"], "float32");
  EXPECT_EQ(d["kernels"], h["kernels"]);

  ASSERT_EQ(post_json(port, kSmallRequest).status, 200);
  const std::string m = http(port, "GET", "/metrics").body;
  for (const char* series :
       {"clef_batches_total{device=\"cpu\"} ", "clef_batch_size_requests_count{device=\"cpu\"} ",
        "clef_batch_size_tokens_bucket{device=\"cpu\",le=\"+Inf\"} ",
        "clef_forward_duration_seconds_sum{device=\"cpu\"} ",
        "clef_gpu_memory_used_bytes{device=\"cpu\"} 0\n"})
    EXPECT_NE(m.find(std::string("\n") + series), std::string::npos) << series << "\n" << m;
}

}  // namespace
}  // namespace clef::server_test
