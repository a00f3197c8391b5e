#include "server/routes.h"

#include "server/playground.h"

namespace clef::server::detail {

Reply handle_get(const Core& core, Route route, std::string_view target) {
  switch (route) {
    case Route::Health:
      return health(core);
    case Route::Live:
      return live(core);
    case Route::Models:
      return models(core);
    case Route::Metrics:
      return metrics_text(core);
    case Route::OpenApi:
      return json_reply(200, core.openapi);
    case Route::Ui:
    case Route::UiAsset:
      return playground_reply(target);
    default:
      return detail_reply(404, "Not Found");
  }
}

// Readiness: 503 from the first moment of a drain (--drain-delay included, while requests are still
// accepted and answered), so a load balancer's health check takes the replica out of rotation
// before its listening socket closes.
Reply health(const Core& core) {
  if (core.shutting_down || !core.ready)
    return json_reply(
        503, dump(ojson{{"status", "draining"}, {"detail", "The server is shutting down"}}));
  const auto& rel = core.decider->release();
  const auto kernels_of = [](const engine::EngineInfo& info) {
    ojson k = ojson::object();
    for (const auto& [name, v] : info.kernels) k[name] = v;
    return k;
  };
  const auto& engines = core.queue.engines();
  const engine::EngineInfo& first = core.infos.front();
  // The top-level backend/device/dtype/kernels/gpu describe the first engine (with one device,
  // the only one); "devices" lists every engine the queue feeds.
  ojson h{{"status", "ok"},
          {"model", core.display_name()},
          {"backend", first.backend},
          {"device", first.device},
          {"dtype", first.dtype},
          {"quantization", !first.quantization.empty() ? first.quantization
                           : rel.quantization.fp8      ? "fp8-e4m3-block128"
                                                       : "none"},
          {"kernels", kernels_of(first)},
          {"model_revision", rel.revision},
          {"weights_sha256_verified", rel.weights_sha256_verified},
          {"max_length", core.decider->options().encode.max_length},
          {"version", core.opts.version},
          {"demo", core.opts.demo}};
  if (!first.versions.empty()) {
    // The GPU itself, as before devices had indices: "NVIDIA H200, sm_90" of "cuda:0 NVIDIA ...".
    std::string name = first.device;
    const std::string index = engines.front().device + " ";
    if (name.rfind(index, 0) == 0) name.erase(0, index.size());
    ojson gpu{{"name", name}};
    for (const auto& [k, v] : first.versions) gpu[k] = v;
    h["gpu"] = gpu;
  }
  ojson devices = ojson::array();
  for (size_t i = 0; i < engines.size(); ++i) {
    const engine::EngineInfo& info = core.infos[i];
    ojson d{{"id", engines[i].device},
            {"backend", info.backend},
            {"device", info.device},
            {"dtype", info.dtype},
            {"kernels", kernels_of(info)}};
    if (i < core.opts.prepared.size() && core.opts.prepared[i].buckets > 0) {
      d["prepare_s"] = core.opts.prepared[i].total_s;
      d["tuning_cache"] = core.opts.prepared[i].cache_status;
    }
    devices.push_back(std::move(d));
  }
  h["devices"] = devices;
  static const engine::PrepareReport kNone;
  const auto& p = core.opts.prepared.empty() ? kNone : core.opts.prepared.front();
  ojson startup{{"load_s", core.opts.load_s}, {"warm_up_s", core.opts.warm_up_s}};
  if (p.buckets > 0) {
    // The first engine's; the others prepared at the same time (devices[].prepare_s).
    startup["prepare_s"] = p.total_s;
    startup["gemm_tuning_s"] = p.tuning_s;
    startup["graphs_s"] = p.graphs_s;
    startup["graphs"] = p.graphs;
    startup["head_s"] = p.head_s;
    startup["buckets"] = p.buckets;
    startup["max_bucket_tokens"] = p.max_bucket;
    startup["gemm_shapes"] = p.gemm_shapes;
    startup["gemm_shapes_from_cache"] = p.gemm_shapes_cached;
    startup["tuning_cache"] = p.cache_status;
    if (!p.cache_path.empty()) startup["tuning_cache_path"] = p.cache_path;
  }
  h["startup"] = startup;
  return json_reply(200, dump(h));
}

// Liveness: 200 whenever the event loop answers, during a drain too (a liveness probe must not
// restart a replica that is finishing its requests).
Reply live(const Core& core) {
  const bool draining = core.shutting_down || !core.ready;
  return json_reply(200, dump(ojson{{"status", draining ? "draining" : "ok"}}));
}

Reply models(const Core& core) {
  ojson data = ojson::array();
  auto add = [&](const std::string& name) {
    data.push_back(ojson{{"id", name},
                         {"object", "model"},
                         {"created", core.started_unix},
                         {"owned_by", "clefserve"}});
  };
  const auto& names = core.decider->options().served_model_names;
  if (names.empty()) add(core.opts.model_name);
  for (const auto& n : names) add(n);
  return json_reply(200, dump(ojson{{"object", "list"}, {"data", data}}));
}

Reply metrics_text(const Core& core) {
  Gauges g;
  g.queue_depth = core.queue.depth();
  g.queue_capacity = core.queue.capacity();
  g.in_flight = core.in_flight.load();
  for (const auto& e : core.queue.engines())
    g.gpu_memory_used_bytes.push_back(e.engine->memory_used_bytes());
  Reply r;
  r.body = core.metrics.render(g);
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  return r;
}

}  // namespace clef::server::detail
