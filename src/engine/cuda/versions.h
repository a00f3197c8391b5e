// The GPU software stack a report needs to be reproducible: the NVIDIA driver (the kernel module's
// /proc file, else NVML; "unknown" when neither answers), the CUDA driver API and runtime versions
// and cuBLASLt's. Plain C++ header.
#pragma once

#include <map>
#include <string>

namespace clef::engine::cuda {

// driver_version, cuda_driver_api, cuda_runtime, cublaslt ("13.0", "13.1.0", ...).
std::map<std::string, std::string> cuda_versions();

// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Sun ..." -> "580.159.04"; "" when
// the text has no such version.
std::string parse_nvidia_driver_version(const std::string& proc_text);

}  // namespace clef::engine::cuda
