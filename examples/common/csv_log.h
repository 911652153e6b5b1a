// A resumed run's CSV logs: the lines a checkpoint's step had written, and none after.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace examples {

// Keeps the header and the lines whose first column is at most `last_kept` (a step or an epoch),
// so a resumed run's log continues exactly where the checkpoint left off.
inline void truncate_log(const std::filesystem::path& file, int64_t last_kept) {
  if (!std::filesystem::exists(file)) return;
  std::ifstream in(file);
  std::string line, kept;
  bool header = true;
  while (std::getline(in, line)) {
    if (header || std::stoll(line.substr(0, line.find(','))) <= last_kept) kept += line + "\n";
    header = false;
  }
  in.close();
  std::ofstream(file) << kept;
}

}  // namespace examples
