// Which kernel variants the backbone dispatchers may run. Auto: the specialised variant wherever
// its preconditions hold (16-byte vector kernels, the tensor-core GDN), the generic one otherwise.
// Generic: always the generic variant (scalar element-wise / norm / prep kernels, SIMT GDN), the
// simplest code with the same rounding points: a baseline for bisecting a parity miss to one
// specialised kernel. Plain C++: included by host code and .cu files alike.
#pragma once

namespace clef::engine::cuda {

enum class KernelPath { Auto, Generic };

inline const char* kernel_path_name(KernelPath p) {
  return p == KernelPath::Generic ? "generic" : "auto";
}

}  // namespace clef::engine::cuda
