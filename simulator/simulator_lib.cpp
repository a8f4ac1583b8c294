// Anchor so the library target exists before its first component lands.
namespace shardscope::simulator_detail { int anchor = 0; }
