// The serial pipeline (engine/pipeline.h) every engine without its own gets: in the server's
// order (batch k+1 begun after await_device(k), before end(k)) each batch answers bit for bit as
// forward() answers it; a batch's error comes out of its end() and leaves the pipeline usable;
// calls out of order are refused.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "encoding/encode.h"
#include "engine/engine.h"
#include "engine/golden_models.h"
#include "engine/pipeline.h"

namespace clef {
namespace {

TEST(SerialPipeline, BatchesInTheWorkersOrderAnswerAsForwardDoes) {
  auto release = testing::load_golden_model("tiny-r2");
  const std::vector<encoding::EncodedRequest> encs = testing::encode_golden("tiny-r2");
  engine::EngineOptions eo;
  eo.threads = 1;
  auto eng = engine::create_engine(release, eo);
  ASSERT_EQ(eng->native_pipeline(), nullptr);  // the CPU engine overlaps nothing
  auto pipe = engine::serial_pipeline(*eng);
  std::mt19937 rng(std::random_device{}());
  std::vector<std::vector<const encoding::EncodedRequest*>> batches;
  for (int k = 0; k < 5; ++k) {
    std::uniform_int_distribution<size_t> pick(0, encs.size() - 1), size(1, 4);
    std::vector<const encoding::EncodedRequest*> b(size(rng));
    for (auto& e : b) e = &encs[pick(rng)];
    batches.push_back(std::move(b));
  }
  engine::ForwardPipeline::Ticket prev = pipe->begin(batches[0]);
  for (size_t k = 1; k <= batches.size(); ++k) {
    pipe->await_device(prev);
    engine::ForwardPipeline::Ticket cur = 0;
    if (k < batches.size()) cur = pipe->begin(batches[k]);
    if (k == 2) {
      EXPECT_THROW(pipe->end(cur), std::logic_error);           // the older batch ends first
      EXPECT_THROW(pipe->begin(batches[0]), std::logic_error);  // two are open
      EXPECT_THROW(pipe->await_device(cur + 100), std::logic_error);
    }
    const auto got = pipe->end(prev);
    const auto want = eng->forward(batches[k - 1]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < got.size(); ++j)
      EXPECT_EQ(got[j].logits, want[j].logits) << "batch " << k - 1 << " request " << j;
    prev = cur;
  }
  // A bad request: its batch's end() throws what forward() throws; the next batch still runs.
  encoding::EncodedRequest bad = encs[0];
  bad.input_ids.back() = release->text.vocab_size;
  const auto t = pipe->begin({&encs[1], &bad});
  const auto u = pipe->begin({&encs[1]});
  pipe->await_device(t);
  EXPECT_THROW(pipe->end(t), std::runtime_error);
  pipe->await_device(u);
  const auto after = pipe->end(u);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].logits, eng->forward({&encs[1]}).at(0).logits);
}

}  // namespace
}  // namespace clef
