#include "engine/pipeline.h"

#include <deque>
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
    if (open_.size() == 2) throw std::logic_error("pipeline: two batches are open already");
    open_.push_back(Slot{next_, batch, {}, nullptr, false});
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
    if (open_.empty() || open_.front().ticket != t)
      throw std::logic_error("pipeline: batches end in the order they began");
    await_device(t);
    Slot s = std::move(open_.front());
    open_.pop_front();
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
    for (Slot& s : open_)
      if (s.ticket == t) return s;
    throw std::logic_error("pipeline: no open batch has this ticket");
  }

  Engine& engine_;
  std::deque<Slot> open_;  // oldest first
  Ticket next_ = 1;
};

}  // namespace

std::unique_ptr<ForwardPipeline> serial_pipeline(Engine& engine) {
  return std::make_unique<SerialPipeline>(engine);
}

}  // namespace clef::engine
