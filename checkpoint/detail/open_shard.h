// A checkpoint's shard file opened for a variable's chunk, or an error saying the checkpoint is
// incomplete (restore and export share it).
#pragma once

#include <nnx/checkpoint/file_io.h>
#include <nnx/core/error.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace nnx::checkpoint::detail {

// `path` holds part of `variable`; `instead` is what else to do with another checkpoint.
inline InputFile open_shard(const std::string& path, const std::string& variable,
                            std::string_view instead) {
  NNX_CHECK(std::filesystem::exists(path),
            "'{}' holds part of '{}' but is missing: the checkpoint is incomplete; copy the file "
            "back, or {} another checkpoint", path, variable, instead);
  return InputFile(path);
}

}  // namespace nnx::checkpoint::detail
