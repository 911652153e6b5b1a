// Variable handles and kind names.
#include <nnx/framework/error.h>
#include <nnx/framework/lazy_array.h>
#include <nnx/framework/variable.h>

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace nnx {

bool VariableType::is_a(const VariableType& other) const {
  for (const VariableType* t = this; t != nullptr; t = t->parent)
    if (t == &other) return true;
  return false;
}

namespace detail {
std::string type_display_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  std::string out = status == 0 && name ? name.get() : type.name();
  if (out.rfind("nnx::", 0) == 0) out = out.substr(5);
  return out;
}
}  // namespace detail

Variable::Variable(Array value, Metadata metadata)
    : impl_(std::make_shared<detail::VariableImpl>(
          detail::VariableImpl{std::move(value), std::move(metadata), &variable_type<Variable>()})) {
  // Inside eval_shape even values built from tensors keep only their shape and dtype.
  auto& v = impl_->value;
  if (detail::abstract_init_active() && v.defined() && !v.is_abstract())
    v = Array::abstract(v.shape(), v.dtype());
}

Variable::Variable(const LazyArray& init, Metadata metadata)
    : Variable(materialize(init), init.metadata.merged_with(metadata)) {}

const Array& Variable::value() const {
  NNX_CHECK(impl_, "empty variable handle: assign a variable (e.g. nnx::Param(init(...))) first");
  return impl_->value;
}

void Variable::set_value(Array value) {
  NNX_CHECK(impl_, "empty variable handle: assign a variable before setting its value");
  impl_->value = std::move(value);
}

const Metadata& Variable::metadata() const {
  NNX_CHECK(impl_, "empty variable handle has no metadata");
  return impl_->metadata;
}

Metadata& Variable::metadata() {
  NNX_CHECK(impl_, "empty variable handle has no metadata");
  return impl_->metadata;
}

const VariableType& Variable::type() const {
  NNX_CHECK(impl_, "empty variable handle has no kind");
  return *impl_->type;
}

void Variable::set_type(const VariableType& type) { impl_->type = &type; }

}  // namespace nnx
