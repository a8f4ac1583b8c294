// Anchor so the library target exists before its first view lands.
namespace shardscope::views_detail { int anchor = 0; }
