// Anchor so the library target exists before its first pass lands.
namespace shardscope::partitioner_detail { int anchor = 0; }
