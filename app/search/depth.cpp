#include "app/search/depth.h"

namespace shardscope::search {

std::optional<DepthRule> DepthRuleOf(std::string_view model, const std::function<std::string(std::string_view)>& setting) {
  if (model == "transformer" || model == "transformer-layer" || model == "mlp") return DepthRule{"layers", 1};
  // The pipelined Transformer: layers = stages x layers per stage; its depth steps by one layer
  // per stage (the iterations stay, each does one more layer's work).
  if (model == "pipelined-transformer") {
    int64_t stages = 0;
    const std::string v = setting("stages");
    for (char ch : v) stages = ch >= '0' && ch <= '9' && stages >= 0 ? stages * 10 + (ch - '0') : -1;
    if (stages < 1) return std::nullopt;
    return DepthRule{"layers", stages};
  }
  if (model == "moe-transformer" || model == "moe-layer")
    return DepthRule{"layers", setting("moe_layers") == "alternate" ? 2 : 1};
  return std::nullopt;
}

}  // namespace shardscope::search
