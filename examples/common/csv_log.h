// A resumed run's CSV logs: the lines a checkpoint's step had written, and none after.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace examples {

// Keeps the header and the lines whose first column is at most `last_kept` (a step or an epoch),
// so a resumed run's log continues exactly where the checkpoint left off. A line whose first
// column is no number (cut short by a crash) goes too.
inline void truncate_log(const std::filesystem::path& file, int64_t last_kept) {
  if (!std::filesystem::exists(file)) return;
  std::ifstream in(file);
  std::string line, kept;
  bool header = true;
  while (std::getline(in, line)) {
    const std::string first = line.substr(0, line.find(','));
    char* end = nullptr;
    const long long row = std::strtoll(first.c_str(), &end, 10);
    const bool number = !first.empty() && *end == '\0';
    if (header || (number && row <= last_kept)) kept += line + "\n";
    header = false;
  }
  in.close();
  std::ofstream(file) << kept;
}

}  // namespace examples
