#include "server/metrics.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace clef::server {

namespace {

// Prometheus floats: Go's strconv style is not required, any decimal the parser accepts is fine;
// %.17g round-trips a double.
std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  const std::string own = labels.empty() ? "" : "{" + labels + "}";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + sep + "le=\"" + le + "\"} " + std::to_string(cumulative) +
           '\n';
  }
  out += name + "_sum" + own + " " + num(sum_) + '\n';
  out += name + "_count" + own + " " + std::to_string(count_) + '\n';
}

Metrics::Metrics(std::vector<std::string> devices)
    : latency_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}) {
  if (devices.empty()) throw std::invalid_argument("Metrics needs at least one device");
  for (const auto& d : devices) {
    // Device names are ours ("cpu", "cuda:N"): nothing to escape, but never emit a broken line.
    if (d.find_first_of("\"\\\n") != std::string::npos)
      throw std::invalid_argument("Metrics: bad device name");
    engines_.push_back(PerEngine{
        "device=\"" + d + "\"", Histogram({1, 2, 4, 8, 16, 32, 64}),
        Histogram({64, 256, 1024, 4096, 16384, 65536, 262144}),
        Histogram({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
        0});
  }
}

void Metrics::observe_request(const std::string& path, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{path, status}];
  // 499 (the client left before its answer) is counted but is no answer: not in the latency.
  if (path == "/v1/systemone" && status != 499) latency_.observe(seconds);
}

void Metrics::add_tokens(size_t input_tokens, size_t truncated_state_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  input_tokens_ += input_tokens;
  truncated_tokens_ += truncated_state_tokens;
}

void Metrics::observe_batch(size_t engine, size_t requests, size_t tokens, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  PerEngine& e = engines_.at(engine);
  ++e.batches;
  e.batch_requests.observe(static_cast<double>(requests));
  e.batch_tokens.observe(static_cast<double>(tokens));
  e.forward_seconds.observe(seconds);
}

void Metrics::add_dropped(size_t requests) {
  std::lock_guard<std::mutex> lock(mutex_);
  dropped_ += requests;
}

std::string Metrics::render(const Gauges& g) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  header(out, "clef_http_requests_total", "counter", "HTTP requests answered, by path and status.");
  for (const auto& [key, n] : requests_) {
    out += "clef_http_requests_total{path=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(n) + '\n';
  }
  header(out, "clef_request_duration_seconds", "histogram",
         "POST /v1/systemone latency from request start to response, in seconds.");
  latency_.render(out, "clef_request_duration_seconds");
  header(out, "clef_input_tokens_total", "counter", "Input tokens of answered requests.");
  out += "clef_input_tokens_total " + std::to_string(input_tokens_) + '\n';
  header(out, "clef_truncated_state_tokens_total", "counter",
         "State tokens cut under truncation \"allow\".");
  out += "clef_truncated_state_tokens_total " + std::to_string(truncated_tokens_) + '\n';
  header(out, "clef_batches_total", "counter", "Engine forward passes run, by device.");
  for (const auto& e : engines_)
    out += "clef_batches_total{" + e.label + "} " + std::to_string(e.batches) + '\n';
  header(out, "clef_requests_dropped_total", "counter",
         "Queued requests dropped before the engine because their client had closed the "
         "connection (logged with status 499).");
  out += "clef_requests_dropped_total " + std::to_string(dropped_) + '\n';
  header(out, "clef_batch_size_requests", "histogram",
         "Requests per engine forward pass, by device.");
  for (const auto& e : engines_) e.batch_requests.render(out, "clef_batch_size_requests", e.label);
  header(out, "clef_batch_size_tokens", "histogram", "Tokens per engine forward pass, by device.");
  for (const auto& e : engines_) e.batch_tokens.render(out, "clef_batch_size_tokens", e.label);
  header(out, "clef_forward_duration_seconds", "histogram",
         "Engine forward pass time, in seconds, by device.");
  for (const auto& e : engines_)
    e.forward_seconds.render(out, "clef_forward_duration_seconds", e.label);
  header(out, "clef_queue_depth", "gauge", "Requests waiting for the engine.");
  out += "clef_queue_depth " + std::to_string(g.queue_depth) + '\n';
  header(out, "clef_queue_capacity", "gauge",
         "Queue bound (--max-queue); beyond it requests get 429.");
  out += "clef_queue_capacity " + std::to_string(g.queue_capacity) + '\n';
  header(out, "clef_in_flight_requests", "gauge", "HTTP requests being handled.");
  out += "clef_in_flight_requests " + std::to_string(g.in_flight) + '\n';
  header(out, "clef_gpu_memory_used_bytes", "gauge",
         "GPU memory in use on each engine's device (0 on the CPU backend).");
  for (size_t i = 0; i < engines_.size(); ++i) {
    const int64_t used = i < g.gpu_memory_used_bytes.size() ? g.gpu_memory_used_bytes[i] : -1;
    out += "clef_gpu_memory_used_bytes{" + engines_[i].label + "} " +
           std::to_string(used < 0 ? 0 : used) + '\n';
  }
  return out;
}

}  // namespace clef::server
