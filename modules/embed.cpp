// Embedding table.
#include <nnx/modules/embed.h>
#include <nnx/modules/detail/checked_size.h>
#include <nnx/sharding/astype.h>
#include <nnx/sharding/ops.h>

namespace nnx {

Embed::Embed(int64_t num_embeddings, int64_t features, Rngs& rngs, EmbedOptions options)
    : embedding(options.embedding_init(
                    rngs.params(),
                    {detail::checked_size(num_embeddings, "Embed", "num_embeddings"),
                     detail::checked_size(features, "Embed", "features")},
                    options.param_dtype),
                options.embedding_metadata),
      dtype(options.dtype) {}

Array Embed::operator()(const Array& ids) const {
  return embedding_lookup(astype(embedding.value(), dtype), ids);
}

Array Embed::attend(const Array& query) const {
  return matmul(astype(query, dtype), transpose(astype(embedding.value(), dtype), 0, 1));
}

}  // namespace nnx
