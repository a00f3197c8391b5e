#include "engine/pipeline.h"

#include <exception>
#include <stdexcept>
#include <utility>

namespace clef::engine {
namespace {

// One batch at a time through forward(), run by await_device(): the order of the calls is the
// pipeline's, the device work is not overlapped.
class SerialPipeline final : public ForwardPipeline {
 public:
  explicit SerialPipeline(Engine& e) : engine_(e) {}

  Ticket begin(const std::vector<const encoding::EncodedRequest*>& batch) override {
    if (open_ == 2) throw std::logic_error("pipeline: two batches are open already");
    Slot& s = slots_[(first_ + open_) % 2];
    s = Slot{next_, batch, {}, nullptr, false};
    ++open_;
    return next_++;
  }

  void await_device(Ticket t) override {
    Slot& s = slot(t);
    if (s.ran) return;
    s.ran = true;
    try {
      s.out = engine_.forward(s.batch);
    } catch (...) {
      s.error = std::current_exception();
    }
  }

  std::vector<ForwardOutput> end(Ticket t) override {
    if (open_ == 0 || slots_[first_].ticket != t)
      throw std::logic_error("pipeline: batches end in the order they began");
    await_device(t);
    Slot s = std::move(slots_[first_]);
    first_ = (first_ + 1) % 2;
    --open_;
    if (s.error) std::rethrow_exception(s.error);
    return std::move(s.out);
  }

 private:
  struct Slot {
    Ticket ticket = 0;
    std::vector<const encoding::EncodedRequest*> batch;
    std::vector<ForwardOutput> out;
    std::exception_ptr error;
    bool ran = false;
  };
  Slot& slot(Ticket t) {
    for (int i = 0; i < open_; ++i) {
      Slot& s = slots_[(first_ + i) % 2];
      if (s.ticket == t) return s;
    }
    throw std::logic_error("pipeline: no open batch has this ticket");
  }

  Engine& engine_;
  Slot slots_[2];
  int first_ = 0, open_ = 0;
  Ticket next_ = 1;
};

// A non-owning view of an engine's own pipeline.
class NativePipeline final : public ForwardPipeline {
 public:
  explicit NativePipeline(ForwardPipeline& p) : p_(p) {}
  Ticket begin(const std::vector<const encoding::EncodedRequest*>& batch) override {
    return p_.begin(batch);
  }
  void await_device(Ticket t) override { p_.await_device(t); }
  std::vector<ForwardOutput> end(Ticket t) override { return p_.end(t); }

 private:
  ForwardPipeline& p_;
};

}  // namespace

std::unique_ptr<ForwardPipeline> make_pipeline(Engine& engine) {
  if (ForwardPipeline* own = engine.native_pipeline())
    return std::make_unique<NativePipeline>(*own);
  return std::make_unique<SerialPipeline>(engine);
}

}  // namespace clef::engine
