// The padded lengths ("token buckets") a GPU engine prepares one CUDA graph and one set of GEMM
// algorithm choices for. Right padding is exact (every backbone op is causal), so the only cost of
// a bucket is the padded rows' compute; the step grows with the length so the padding stays near a
// fixed fraction of the request (at most 1/16 of it from 256 tokens on; 2% on average over
// public231-shape) while the number of buckets grows only with log(max length): 16 per doubling.
#pragma once

#include <vector>

namespace clef::engine {

// The smallest bucket >= T (T >= 1). Steps: 8 tokens below 256, then 2^floor(log2 T) / 16.
int bucket_tokens(int T);

// Every bucket a request of 1..max_tokens tokens can land in, ascending; the last is
// bucket_tokens(max_tokens).
std::vector<int> all_buckets(int max_tokens);

}  // namespace clef::engine
