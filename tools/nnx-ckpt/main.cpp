// nnx-ckpt: inspect and convert nnx checkpoints.
//   nnx-ckpt ls DIR                      the tree: paths, dtypes, global shapes, specs, sizes
//   nnx-ckpt verify DIR                  every file and checksum; exit status 1 on a problem
//   nnx-ckpt export DIR OUT.safetensors  whole tensors in one plain safetensors file
//   nnx-ckpt import IN.safetensors DIR [--rename FROM=TO]...   a plain file as a checkpoint
//   nnx-ckpt --help                      this list, on standard output, status 0
#include <nnx/checkpoint/inspect.h>

#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

constexpr const char* kUsage =
    "usage: nnx-ckpt ls DIR\n"
    "       nnx-ckpt verify DIR\n"
    "       nnx-ckpt export DIR OUT.safetensors\n"
    "       nnx-ckpt import IN.safetensors DIR [--rename FROM=TO]...\n"
    "       nnx-ckpt --help\n"
    "  ls      paths, kinds, dtypes, global shapes, specs and sizes\n"
    "  verify  every file, header and checksum; status 1 on a problem\n"
    "  export  whole tensors in one plain safetensors file\n"
    "  import  a plain safetensors file as a checkpoint of whole arrays\n";

int usage(const std::string& problem) {
  fmt::print(stderr, "nnx-ckpt: {}\n{}", problem, kUsage);
  return 2;
}

int run(const std::vector<std::string>& args) {
  namespace ckpt = nnx::checkpoint;
  if (args.empty()) return usage("no command");
  const std::string& command = args[0];
  if ((command == "--help" || command == "-h" || command == "help") && args.size() == 1) {
    fmt::print("{}", kUsage);
    return 0;
  }
  if (command == "ls" && args.size() == 2) {
    fmt::print("{}", ckpt::describe(args[1]));
    return 0;
  }
  if (command == "verify" && args.size() == 2) {
    auto report = ckpt::verify(args[1]);
    for (const auto& p : report.problems) fmt::print(stderr, "problem: {}\n", p);
    fmt::print("{}: {} variable(s), {} chunk(s), {} bytes checked, {} problem(s)\n", args[1],
               report.variables, report.chunks, report.bytes, report.problems.size());
    return report.ok() ? 0 : 1;
  }
  if (command == "export" && args.size() == 3) {
    ckpt::export_safetensors(args[1], args[2]);
    fmt::print("exported {} to {}\n", args[1], args[2]);
    return 0;
  }
  if (command == "import" && args.size() >= 3) {
    ckpt::Renames renames;
    for (size_t i = 3; i < args.size(); i += 2) {
      if (args[i] != "--rename" || i + 1 >= args.size() ||
          args[i + 1].find('=') == std::string::npos)
        return usage(fmt::format("'{}': import takes --rename FROM=TO options", args[i]));
      const auto eq = args[i + 1].find('=');
      renames.emplace_back(args[i + 1].substr(0, eq), args[i + 1].substr(eq + 1));
    }
    ckpt::import_safetensors(args[1], args[2], renames);
    fmt::print("imported {} as the checkpoint {}\n", args[1], args[2]);
    return 0;
  }
  return usage(fmt::format("unknown command or wrong arguments: '{}'", command));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    fmt::print(stderr, "nnx-ckpt: {}\n", e.what());
    return 1;
  }
}
