#include "bench/evidence.h"

#include <cstdio>
#include <memory>

namespace clef::bench {

using Json = nlohmann::ordered_json;

namespace {

std::string run_capture(const char* cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd, "r"), pclose);
  if (!pipe) return {};
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  return out;
}

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// First string among health's candidate keys (servers name these differently).
std::string health_string(const Json& h, std::initializer_list<const char*> keys) {
  if (!h.is_object()) return {};
  for (const char* k : keys) {
    auto it = h.find(k);
    if (it != h.end() && it->is_string() && !it->get<std::string>().empty())
      return it->get<std::string>();
    if (it != h.end() && it->is_number()) return it->dump();
  }
  // Also look one level down in a "gpu" / "cuda" object.
  for (const char* group : {"gpu", "cuda"}) {
    auto g = h.find(group);
    if (g == h.end() || !g->is_object()) continue;
    for (const char* k : keys) {
      auto it = g->find(k);
      if (it != g->end() && it->is_string() && !it->get<std::string>().empty())
        return it->get<std::string>();
    }
  }
  return {};
}

// gpu.KEY of clefserve's /health, else "" (a top-level "device" is the GPU name plus its sm_ arch).
std::string gpu_object_string(const Json& h, const char* key) {
  if (!h.is_object()) return {};
  const auto g = h.find("gpu");
  if (g == h.end() || !g->is_object()) return {};
  const auto it = g->find(key);
  if (it == g->end() || !it->is_string()) return {};
  return it->get<std::string>();
}

void collect_unknown(const Json& j, const std::string& path, std::vector<std::string>& out) {
  if (j.is_string() && j.get<std::string>() == kUnknown) {
    out.push_back(path);
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.items()) collect_unknown(v, path.empty() ? k : path + "." + k, out);
  }
}

}  // namespace

GpuInfo local_nvidia_smi() {
  GpuInfo g;
  const std::string q = trim(
      run_capture("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null"));
  if (q.empty()) return g;
  const std::string first = q.substr(0, q.find('\n'));
  const auto comma = first.rfind(',');
  if (comma == std::string::npos) return g;
  g.name = trim(first.substr(0, comma));
  g.driver = trim(first.substr(comma + 1));
  const std::string banner = run_capture("nvidia-smi 2>/dev/null");
  const auto at = banner.find("CUDA Version:");
  if (at != std::string::npos) {
    std::string v = trim(banner.substr(at + 13, 16));
    g.cuda = v.substr(0, v.find_first_of(" |"));
  }
  g.source = "nvidia-smi";
  return g;
}

ServerEvidence gather_server_evidence(const Target& t, const ClientOptions& opts) {
  ServerEvidence ev;
  ev.health = kUnknown;
  auto cli = make_client(t, opts);
  auto res = cli->Get(t.health_path().c_str(), request_headers(opts));
  if (!res) {
    ev.health_error = "GET /health: " + httplib::to_string(res.error());
  } else if (res->status != 200) {
    ev.health_error = "GET /health: HTTP " + std::to_string(res->status);
  } else {
    try {
      ev.health = Json::parse(res->body);
    } catch (const Json::exception&) {
      ev.health_error = "GET /health: body is not JSON";
    }
  }
  const std::string backend = health_string(ev.health, {"backend"});
  if (backend == "cpu") {
    ev.gpu.name = ev.gpu.driver = ev.gpu.cuda = ev.gpu.cublaslt = "not applicable (cpu backend)";
    ev.gpu.source = "health: cpu backend";
    return ev;
  }
  GpuInfo g;
  if (backend == "cuda") {
    auto pick = [&h = ev.health](std::string& field, const char* gpu_key,
                                 std::initializer_list<const char*> keys) {
      std::string s = gpu_object_string(h, gpu_key);
      if (s.empty()) s = health_string(h, keys);
      if (!s.empty()) field = s;
    };
    pick(g.name, "name", {"gpu_name", "device", "gpu"});
    pick(g.driver, "driver_version", {"driver_version", "driver", "cuda_driver"});
    pick(g.cuda, "cuda_runtime", {"cuda_version", "cuda_runtime", "cuda"});
    pick(g.cublaslt, "cublaslt", {"cublaslt", "cublaslt_version"});
    g.source = "health";
  } else {
    g.cublaslt = backend.empty() ? "not reported (no backend in /health)"
                                 : "not reported (" + backend + " backend)";
  }
  if (t.local && (g.name == kUnknown || g.driver == kUnknown || g.cuda == kUnknown)) {
    const GpuInfo smi = local_nvidia_smi();
    bool used = false;
    auto fill = [&used](std::string& field, const std::string& v) {
      if (field == kUnknown && v != kUnknown) {
        field = v;
        used = true;
      }
    };
    fill(g.name, smi.name);
    fill(g.driver, smi.driver);
    fill(g.cuda, smi.cuda);
    if (used) g.source = g.source == "none" ? "nvidia-smi" : g.source + "+nvidia-smi";
  }
  ev.gpu = g;
  return ev;
}

std::vector<std::string> missing_evidence(const Json& evidence) {
  std::vector<std::string> out;
  collect_unknown(evidence, "", out);
  return out;
}

}  // namespace clef::bench
