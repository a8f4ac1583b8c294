#include "partitioner/spmd/handler_table.h"

namespace shardscope::spmd {

void HandlerTable::Add(std::initializer_list<Opcode> ops, Handler handler) {
  for (Opcode op : ops) by_opcode_[op] = handler;
}

bool HandlerTable::Absorbed(const Instruction& inst) const {
  for (const PatternHandler& p : patterns_)
    if (p.absorbs(inst)) return true;
  return false;
}

void HandlerTable::AddGeneric(std::initializer_list<const char*> opcode_texts, Handler handler) {
  for (const char* text : opcode_texts) by_generic_text_[text] = handler;
}

Handler HandlerTable::Find(Opcode op) const {
  auto it = by_opcode_.find(op);
  return it == by_opcode_.end() ? nullptr : it->second;
}

Handler HandlerTable::Find(const Instruction& inst) const {
  if (inst.opcode() != Opcode::kGeneric) return Find(inst.opcode());
  auto it = by_generic_text_.find(inst.opcode_text());
  return it == by_generic_text_.end() ? nullptr : it->second;
}

const HandlerTable& SpmdHandlers() {
  static const HandlerTable table = [] {
    HandlerTable t;
    RegisterElementwiseHandlers(t);
    RegisterShapeHandlers(t);
    RegisterReduceHandlers(t);
    RegisterControlFlowHandlers(t);
    RegisterFormattingHandlers(t);
    RegisterDotHandlers(t);
    RegisterWindowedHandlers(t);
    RegisterGatherScatterHandlers(t);
    RegisterShiftPatterns(t);
    RegisterTopKPattern(t);
    RegisterIoAndTokenHandlers(t);
    return t;
  }();
  return table;
}

}  // namespace shardscope::spmd
