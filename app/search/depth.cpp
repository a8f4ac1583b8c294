#include "app/search/depth.h"

namespace shardscope::search {

std::optional<DepthRule> DepthRuleOf(std::string_view model, const std::function<std::string(std::string_view)>& setting) {
  if (model == "transformer" || model == "transformer-layer" || model == "mlp") return DepthRule{"layers", 1};
  if (model == "moe-transformer" || model == "moe-layer")
    return DepthRule{"layers", setting("moe_layers") == "alternate" ? 2 : 1};
  return std::nullopt;
}

}  // namespace shardscope::search
