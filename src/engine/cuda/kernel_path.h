// Which variant of a backbone kernel runs. Auto: the fastest this device supports (vectorised
// element-wise paths, the tensor-core GDN core where its shared memory fits). Generic: the plain
// paths every sm_80+ device runs, e.g. to bisect a parity miss.
#pragma once

namespace clef::engine::cuda {

enum class KernelPath { Auto, Generic };

}  // namespace clef::engine::cuda
