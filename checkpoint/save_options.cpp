// SaveOptions checked before a save deletes or writes anything: its JSON must be storable in the
// manifest as given.
#include <nnx/checkpoint/detail/parse_util.h>
#include <nnx/checkpoint/detail/save_plan.h>
#include <nnx/core/error.h>

#include <cmath>
#include <string>

namespace nnx::checkpoint::detail {

namespace {

// Throws where `value` holds a number JSON cannot store (NaN and infinities would be written as
// null), naming `option` and the JSON pointer of the number.
void check_numbers_storable(const nlohmann::json& value, const std::string& option,
                            const std::string& pointer) {
  if (value.is_number_float())
    NNX_CHECK(std::isfinite(value.get<double>()),
              "{} holds {} at '{}', which JSON cannot store (it would be read back as null); "
              "store it as a string, or leave it out",
              option, value.get<double>(), pointer.empty() ? "/" : pointer);
  if (value.is_object())
    for (const auto& [key, item] : value.items())
      check_numbers_storable(item, option, pointer + "/" + key);
  if (value.is_array())
    for (size_t i = 0; i < value.size(); ++i)
      check_numbers_storable(value[i], option, pointer + "/" + std::to_string(i));
}

void check_storable(const nlohmann::json& value, const std::string& option) {
  check_numbers_storable(value, option, "");
  try {
    (void)value.dump();
  } catch (const nlohmann::json::exception& e) {
    NNX_FAIL("{} cannot be written as JSON ({}); its strings must be valid UTF-8", option,
             e.what());
  }
}

}  // namespace

void check_save_options(const Communicator& comm, const SaveOptions& options) {
  std::string error;
  try {
    NNX_CHECK(options.metadata.is_object() || options.metadata.is_null(),
              "SaveOptions::metadata must be a JSON object (read_metadata gives it back), got {}",
              excerpt(options.metadata));
    check_storable(options.metadata, "SaveOptions::metadata");
    check_storable(options.per_rank, "SaveOptions::per_rank");
  } catch (const std::exception& e) {
    error = e.what();
  }
  raise_if_any_failed(comm, error);
}

}  // namespace nnx::checkpoint::detail
