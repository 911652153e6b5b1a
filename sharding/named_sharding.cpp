// NamedSharding text form.
#include <nnx/sharding/named_sharding.h>

#include <fmt/format.h>

namespace nnx {

std::string NamedSharding::to_string() const {
  return fmt::format("NamedSharding(mesh={}, spec={})", mesh ? mesh->to_string() : "None",
                     spec.to_string());
}

}  // namespace nnx
