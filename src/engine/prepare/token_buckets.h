// The padded lengths ("token buckets") a GPU engine prepares one CUDA graph and one set of GEMM
// algorithm choices for. Right padding is exact (every backbone op is causal), so the only cost of
// a bucket is the padded rows' compute; the step grows with the length so the padding stays near a
// fixed fraction of the request (under 1/32 of it from 256 tokens on; ~1% on average over
// public231-shape) while the number of buckets grows only with log(max length): 32 per doubling.
// Why 32 and not 16: a padded row costs what a real one does in every kernel and GEMM (at 5661
// tokens 16 per doubling padded to 5888, +4% of the forward); 32 doubles the start-up's GEMM
// timing and graph captures, which stay well inside the start-up budget (docs/perf-log.md v18a).
#pragma once

#include <vector>

namespace clef::engine {

// The smallest bucket >= T (T >= 1). Steps: 8 tokens below 512, then 2^floor(log2 T) / 32.
int bucket_tokens(int T);

// Every bucket a request of 1..max_tokens tokens can land in, ascending; the last is
// bucket_tokens(max_tokens).
std::vector<int> all_buckets(int max_tokens);

}  // namespace clef::engine
