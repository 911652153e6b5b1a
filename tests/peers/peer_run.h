// The start of a peer program's main: the folder the Python side wrote its inputs to, the tag of
// this run's outputs, and the JSON spec of the inputs.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>

namespace nnx_peers {

struct PeerRun {
  std::string dir, tag;
  nlohmann::json spec;
};

// The run `program DIR TAG` asks for, with DIR/`spec_file` parsed; nullopt, after the usage line
// on stderr, for other arguments.
inline std::optional<PeerRun> read_peer_run(int argc, char** argv, const char* program,
                                            const std::string& spec_file = "inputs.json") {
  if (argc != 3) {
    fmt::print(stderr, "usage: {} DIR TAG\n", program);
    return std::nullopt;
  }
  PeerRun run{argv[1], argv[2], {}};
  std::ifstream in(run.dir + "/" + spec_file);
  if (!in) throw std::runtime_error("cannot read " + run.dir + "/" + spec_file);
  in >> run.spec;
  return run;
}

}  // namespace nnx_peers
