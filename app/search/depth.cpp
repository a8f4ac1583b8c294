#include "app/search/depth.h"

namespace shardscope::search {

std::optional<DepthRule> DepthRuleOf(std::string_view model, const std::function<std::string(std::string_view)>& setting) {
  // The dense models: the embedding, the loss and the optimizer's step do not change with the
  // depth, so one layer and two fix the line (tests/test_search.cpp against full depth).
  if (model == "transformer" || model == "transformer-layer" || model == "mlp") return DepthRule{"layers", 1, 1};
  // The pipelined Transformer: layers = stages x layers per stage; its depth steps by one layer
  // per stage (the iterations stay, each does one more layer's work).
  if (model == "pipelined-transformer") {
    int64_t stages = 0;
    const std::string v = setting("stages");
    for (char ch : v) stages = ch >= '0' && ch <= '9' && stages >= 0 ? stages * 10 + (ch - '0') : -1;
    if (stages < 1) return std::nullopt;
    // One layer per stage is its own case (measured 0.3-2.6% off the line through 2 and 3 layers
    // per stage at 128 and 2048 TPU v3 cores): from two layers per stage on.
    return DepthRule{"layers", stages, 2};
  }
  // The MoE Transformer: a unit is a layer, or a dense + MoE pair when they alternate; one unit
  // and two give the line two and three gave (tests/test_search.cpp).
  if (model == "moe-transformer" || model == "moe-layer")
    return DepthRule{"layers", setting("moe_layers") == "alternate" ? 2 : 1, 1};
  return std::nullopt;
}

}  // namespace shardscope::search
