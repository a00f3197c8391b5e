// `serve --device` on a machine with GPUs: cuda:0 serves as before (its index in /health and in
// the /metrics labels), an index the machine does not have is refused with exit 2 before anything
// loads, and with two or more GPUs every device serves from the one queue.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "engine/device_spec.h"
#include "engine/engine.h"
#include "engine/golden_models.h"
#include "server/server_process.h"

namespace clef {
namespace {

using server_test::golden_model;
using server_test::golden_requests;
using server_test::http;
using server_test::post_json;
using server_test::ServerProcess;

// The value of the sample `series` (name plus labels, exactly as printed), -1 when absent.
double sample(const std::string& metrics, const std::string& series) {
  const std::string key = "\n" + series + " ";
  const size_t at = ("\n" + metrics).find(key);
  return at == std::string::npos ? -1 : std::stod(metrics.substr(at + key.size() - 1));
}

std::vector<std::string> serve_args(const std::string& devices) {
  return {"--model", golden_model("tiny-r2"), "--device", devices, "--max-length",
          "1024",    "--tuning-cache",        "off"};
}

TEST(ServeDevices, EngineNamesItsDevice) {
  engine::EngineOptions eo;
  eo.device = engine::Device::Cuda;
  eo.device_index = 0;
  auto e = engine::create_engine(testing::load_golden_model("tiny-r2"), eo);
  EXPECT_EQ(e->info().device.rfind("cuda:0 ", 0), 0u) << e->info().device;
  eo.device_index = engine::cuda_device_count();  // one past the last
  try {
    engine::create_engine(testing::load_golden_model("tiny-r2"), eo);
    ADD_FAILURE() << "an engine on a device the machine does not have";
  } catch (const std::runtime_error& err) {
    EXPECT_NE(
        std::string(err.what()).find("no CUDA device cuda:" + std::to_string(eo.device_index)),
        std::string::npos)
        << err.what();
  }
}

TEST(ServeDevices, Cuda0ServesAsBefore) {
  ServerProcess srv(serve_args("cuda:0"));
  ASSERT_TRUE(srv.started()) << srv.log();
  auto h = http(srv.port(), "GET", "/health").json();
  EXPECT_EQ(h["status"], "ok") << h.dump();
  EXPECT_EQ(h["backend"], "cuda");
  ASSERT_EQ(h["devices"].size(), 1u) << h.dump();
  EXPECT_EQ(h["devices"][0]["id"], "cuda:0");
  EXPECT_EQ(h["devices"][0]["device"].get<std::string>().rfind("cuda:0 ", 0), 0u) << h.dump();
  EXPECT_EQ(h["device"], h["devices"][0]["device"]);
  // gpu.name is the GPU without its index, as before.
  EXPECT_EQ("cuda:0 " + h["gpu"]["name"].get<std::string>(), h["device"].get<std::string>());
  int answered = 0;
  for (const auto& body : golden_requests("tiny-r2")) {
    const auto r = post_json(srv.port(), body);
    if (r.status == 200) ++answered;
    // Requests longer than --max-length 1024 are refused as before (422), never a 500.
    EXPECT_TRUE(r.status == 200 || r.status == 422) << r.status << " " << r.body;
  }
  EXPECT_GT(answered, 0);
  const std::string m = http(srv.port(), "GET", "/metrics").body;
  // One client, one request at a time: one pass each (the warm-up runs before the queue).
  EXPECT_EQ(sample(m, R"(clef_batches_total{device="cuda:0"})"), answered) << m;
  EXPECT_GT(sample(m, R"(clef_gpu_memory_used_bytes{device="cuda:0"})"), 0) << m;
}

TEST(ServeDevices, AnIndexTheMachineLacksIsRefused) {
  const int n = engine::cuda_device_count();
  ASSERT_GT(n, 0);
  const std::string missing = "cuda:" + std::to_string(n);  // cuda:1 on a one-GPU machine
  for (const std::string& spec : {missing, "cuda:0," + missing}) {
    ServerProcess srv(serve_args(spec));
    EXPECT_FALSE(srv.started());
    EXPECT_EQ(srv.wait_exit(60), 2) << srv.log();
    const std::string log = srv.log();
    EXPECT_NE(log.find("--device " + missing + ": this machine has " + std::to_string(n) +
                       " CUDA device"),
              std::string::npos)
        << log;
    EXPECT_EQ(log.find("info load"), std::string::npos) << "loaded before refusing:\n" << log;
  }
}

TEST(ServeDevices, EveryGpuServesFromTheOneQueue) {
  const int n = engine::cuda_device_count();
  if (n < 2) GTEST_SKIP() << "one GPU: cuda:all is cuda:0 (Cuda0ServesAsBefore)";
  ServerProcess srv({"--model", golden_model("tiny-r2"), "--device", "cuda:all", "--max-length",
                     "1024", "--tuning-cache", "off", "--max-batch-tokens", "1"});
  ASSERT_TRUE(srv.started()) << srv.log();
  auto h = http(srv.port(), "GET", "/health").json();
  ASSERT_EQ(h["devices"].size(), static_cast<size_t>(n)) << h.dump();
  for (int i = 0; i < n; ++i) EXPECT_EQ(h["devices"][i]["id"], "cuda:" + std::to_string(i));
  // Concurrent clients: every engine's worker takes batches (one request each).
  std::atomic<int> failures{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4 * n; ++c)
    clients.emplace_back([&] {
      for (int k = 0; k < 10; ++k)
        if (post_json(srv.port(), server_test::kSmallRequest).status != 200) ++failures;
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(failures.load(), 0);
  const std::string m = http(srv.port(), "GET", "/metrics").body;
  double total = 0;
  for (int i = 0; i < n; ++i) {
    const double b = sample(m, "clef_batches_total{device=\"cuda:" + std::to_string(i) + "\"}");
    EXPECT_GT(b, 0) << "cuda:" << i << " ran no batch\n" << m;
    EXPECT_GT(sample(m, "clef_gpu_memory_used_bytes{device=\"cuda:" + std::to_string(i) + "\"}"), 0)
        << m;
    total += b;
  }
  EXPECT_EQ(total, 4 * n * 10) << m;
}

}  // namespace
}  // namespace clef
