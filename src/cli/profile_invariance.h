// `clefserve profile --invariance` (issue 14): is a request's answer the same alone as inside a
// packed forward? For the sequences of --lengths, packed into one forward: each request's logits
// alone against inside the pack (the served path: graphs and the joint head), then the backbone's
// hidden rows alone against packed after each of --layers decoder layers, so the first layer
// whose rows differ says which kernel rounds by the pack.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/release.h"

namespace clef::cli {

struct InvarianceArgs {
  std::vector<int> lengths;  // the pack's sequences, in order
  std::vector<int> layers;   // decoder layers after which rows are compared (-1: all + norm)
  unsigned seed = 1;
};

// Prints one table; returns 0 when every compared value is equal bit for bit, 3 otherwise.
int run_invariance_check(const InvarianceArgs& a, const std::shared_ptr<const model::Release>& r,
                         engine::Engine& eng);

}  // namespace clef::cli
