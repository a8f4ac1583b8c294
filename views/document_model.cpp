#include "views/document_model.h"

#include <QFileInfo>
#include <QUndoCommand>
#include <QUndoStack>

#include "core/ir/hlo_text.h"

namespace shardscope::views {

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }

class SetAnnotationCommand : public QUndoCommand {
 public:
  SetAnnotationCommand(DocumentModel* doc, int64_t id, std::optional<HloSharding> before,
                       std::optional<HloSharding> after, const QString& text)
      : QUndoCommand(text), doc_(doc), id_(id), before_(std::move(before)), after_(std::move(after)) {}
  void redo() override { doc_->applyAnnotation(id_, after_); }
  void undo() override { doc_->applyAnnotation(id_, before_); }

 private:
  DocumentModel* doc_;
  int64_t id_;
  std::optional<HloSharding> before_, after_;
};

class SetMeshCommand : public QUndoCommand {
 public:
  SetMeshCommand(DocumentModel* doc, DeviceMesh before_mesh, std::map<int64_t, HloSharding> before,
                 DeviceMesh after_mesh, std::map<int64_t, HloSharding> after)
      : QUndoCommand(QString("Mesh %1").arg(Q(after_mesh.ToString()))),
        doc_(doc),
        before_mesh_(std::move(before_mesh)),
        after_mesh_(std::move(after_mesh)),
        before_(std::move(before)),
        after_(std::move(after)) {}
  void redo() override { doc_->applyMeshState(after_mesh_, after_); }
  void undo() override { doc_->applyMeshState(before_mesh_, before_); }

 private:
  DocumentModel* doc_;
  DeviceMesh before_mesh_, after_mesh_;
  std::map<int64_t, HloSharding> before_, after_;
};

class SetWeightUpdateShardingCommand : public QUndoCommand {
 public:
  SetWeightUpdateShardingCommand(DocumentModel* doc, bool on)
      : QUndoCommand(on ? "Weight-update sharding on" : "Weight-update sharding off"), doc_(doc), on_(on) {}
  void redo() override { doc_->applyWeightUpdateSharding(on_); }
  void undo() override { doc_->applyWeightUpdateSharding(!on_); }

 private:
  DocumentModel* doc_;
  bool on_;
};

class SetSliceOverrideCommand : public QUndoCommand {
 public:
  SetSliceOverrideCommand(DocumentModel* doc, ProjectSliceOverride before, ProjectSliceOverride after)
      : QUndoCommand("Change the simulated slice"), doc_(doc), before_(std::move(before)), after_(std::move(after)) {}
  void redo() override { doc_->applySliceOverride(after_); }
  void undo() override { doc_->applySliceOverride(before_); }

 private:
  DocumentModel* doc_;
  ProjectSliceOverride before_, after_;
};

class SetSimulatedSizesCommand : public QUndoCommand {
 public:
  SetSimulatedSizesCommand(DocumentModel* doc, ProjectSimulatedSizes before, ProjectSimulatedSizes after)
      : QUndoCommand("Change the simulated sizes"), doc_(doc), before_(std::move(before)), after_(std::move(after)) {}
  void redo() override { doc_->applySimulatedSizes(after_); }
  void undo() override { doc_->applySimulatedSizes(before_); }

 private:
  DocumentModel* doc_;
  ProjectSimulatedSizes before_, after_;
};

// The mesh-axis names a sharding uses per tensor dim, or nullopt when it is not expressible over
// `mesh`.
std::optional<std::vector<std::vector<std::string>>> AxisNamesOf(const HloSharding& s, int64_t rank,
                                                                 const DeviceMesh& mesh) {
  auto axes = AxesOf(s, rank, mesh);
  if (!axes.ok()) return std::nullopt;
  if (!axes->unreduced_axes.empty()) return std::nullopt;
  std::vector<std::vector<std::string>> names;
  for (const auto& dim : axes->dim_axes) {
    std::vector<std::string> n;
    for (int64_t a : dim) n.push_back(mesh.axes()[static_cast<size_t>(a)].name);
    names.push_back(std::move(n));
  }
  return names;
}

}  // namespace

DocumentModel::DocumentModel(QObject* parent)
    : QObject(parent),
      undo_stack_(new QUndoStack(this)),
      propagated_(std::make_shared<const std::unordered_map<int64_t, HloSharding>>()) {
  connect(undo_stack_, &QUndoStack::cleanChanged, this, [this](bool clean) { emit modifiedChanged(!clean); });
}

DocumentModel::~DocumentModel() = default;

QString DocumentModel::title() const {
  if (!module_) return QString();
  if (!file_path_.isEmpty()) return QFileInfo(file_path_).fileName();
  return Q(module_->name());
}

bool DocumentModel::isModified() const { return !undo_stack_->isClean(); }

void DocumentModel::setClean() { undo_stack_->setClean(); }

// ---- The module -----------------------------------------------------------------------------------

void DocumentModel::setFilePath(const QString& path) {
  if (path == file_path_) return;
  file_path_ = path;
  emit filePathChanged();
}

void DocumentModel::clear() { setModule(nullptr, DeviceMesh(), QString(), QString()); }

void DocumentModel::setModule(std::unique_ptr<Module> module, const DeviceMesh& mesh, const QString& source_kind,
                              const QString& source, const QString& file_path) {
  std::map<int64_t, HloSharding> annotations;
  for (size_t c = 0; module && c < module->computations().size(); ++c) {
    for (const auto& inst : module->computations()[c]->instructions()) {
      if (inst->has_sharding()) {
        annotations.emplace(inst->id(), *inst->sharding());
        inst->clear_sharding();
      }
    }
  }
  reset(std::shared_ptr<const Module>(std::move(module)), std::move(annotations), mesh, source_kind, source, file_path);
}

void DocumentModel::showModule(std::shared_ptr<const Module> module, const DeviceMesh& mesh, const QString& source_kind,
                               const QString& source) {
  std::map<int64_t, HloSharding> annotations;
  for (size_t c = 0; module && c < module->computations().size(); ++c) {
    for (const auto& inst : module->computations()[c]->instructions()) {
      if (inst->has_sharding()) annotations.emplace(inst->id(), *inst->sharding());
    }
  }
  reset(std::move(module), std::move(annotations), mesh, source_kind, source, QString());
}

void DocumentModel::reset(std::shared_ptr<const Module> module, std::map<int64_t, HloSharding> annotations,
                          const DeviceMesh& mesh, const QString& source_kind, const QString& source,
                          const QString& file_path) {
  annotations_ = std::move(annotations);
  module_ = std::move(module);
  mesh_ = mesh;
  source_kind_ = source_kind;
  source_ = source;
  file_path_ = file_path;
  zoo_settings_.reset();
  selected_ = -1;
  const bool had_weight_update_sharding = weight_update_sharding_;
  weight_update_sharding_ = false;
  propagated_ = std::make_shared<const std::unordered_map<int64_t, HloSharding>>();
  why_.clear();
  propagation_summary_.clear();
  ++module_generation_;
  ++edit_generation_;
  rebuildIndex();
  undo_stack_->clear();
  emit moduleReset();
  emit meshChanged();
  emit annotationsChanged();
  emit selectionChanged(-1);
  if (had_weight_update_sharding) emit weightUpdateShardingChanged(false);
  if (!slice_override_.empty()) {
    slice_override_ = {};
    emit sliceOverrideChanged();
  }
  if (!simulated_sizes_.empty()) {
    simulated_sizes_ = {};
    emit simulatedSizesChanged();
  }
}

void DocumentModel::setWeightUpdateSharding(bool on) {
  if (!module_ || on == weight_update_sharding_) return;
  undo_stack_->push(new SetWeightUpdateShardingCommand(this, on));
}

void DocumentModel::applyWeightUpdateSharding(bool on) {
  if (on == weight_update_sharding_) return;
  weight_update_sharding_ = on;
  emit weightUpdateShardingChanged(on);
}

void DocumentModel::setSliceOverride(const ProjectSliceOverride& slice) {
  if (!module_ || slice == slice_override_) return;
  undo_stack_->push(new SetSliceOverrideCommand(this, slice_override_, slice));
}

void DocumentModel::applySliceOverride(const ProjectSliceOverride& slice) {
  if (slice == slice_override_) return;
  slice_override_ = slice;
  emit sliceOverrideChanged();
}

void DocumentModel::setSimulatedSizes(const ProjectSimulatedSizes& sizes) {
  if (!module_ || sizes == simulated_sizes_) return;
  undo_stack_->push(new SetSimulatedSizesCommand(this, simulated_sizes_, sizes));
}

void DocumentModel::applySimulatedSizes(const ProjectSimulatedSizes& sizes) {
  if (sizes == simulated_sizes_) return;
  simulated_sizes_ = sizes;
  emit simulatedSizesChanged();
}

void DocumentModel::rebuildIndex() {
  by_id_.clear();
  if (!module_) return;
  for (const auto& comp : module_->computations()) {
    for (const auto& inst : comp->instructions()) by_id_.emplace(inst->id(), inst.get());
  }
}

const Instruction* DocumentModel::instruction(int64_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

const Instruction* DocumentModel::findInstruction(const QString& name) const {
  if (!module_) return nullptr;
  return module_->FindInstruction(name.toStdString());
}

QString DocumentModel::qualifiedName(const Instruction* inst) const {
  if (!inst) return {};
  if (inst->parent() && module_ && inst->parent() != module_->entry()) {
    return Q(inst->parent()->name()) + "/" + Q(inst->name());
  }
  return Q(inst->name());
}

std::unique_ptr<Module> DocumentModel::annotatedClone(bool with_inferred) const {
  if (!module_) return nullptr;
  auto clone = module_->Clone();
  for (const auto& comp : clone->computations()) {
    for (const auto& inst : comp->instructions()) {
      // With the inferred shardings: propagation's result for every instruction it sharded (an
      // annotation it refined included), as the partitioner gets it, while it is the result of
      // the current annotations; else the annotations.
      if (with_inferred && (propagated_edit_ == edit_generation_ || !annotations_.count(inst->id()))) {
        auto t = propagated_->find(inst->id());
        if (t != propagated_->end()) {
          inst->set_sharding(t->second);
          continue;
        }
      }
      auto a = annotations_.find(inst->id());
      if (a != annotations_.end()) inst->set_sharding(a->second);
    }
  }
  return clone;
}

QString DocumentModel::moduleText(bool with_inferred) const {
  auto clone = annotatedClone(with_inferred);
  return clone ? Q(PrintHloModule(*clone)) : QString();
}

// ---- Annotations and mesh -------------------------------------------------------------------------

std::optional<HloSharding> DocumentModel::annotation(int64_t id) const {
  auto it = annotations_.find(id);
  if (it == annotations_.end()) return std::nullopt;
  return it->second;
}

bool DocumentModel::annotate(int64_t id, const HloSharding& sharding) {
  const Instruction* inst = instruction(id);
  if (!inst) {
    emit errorOccurred(QString("no instruction with id %1").arg(id));
    return false;
  }
  if (sharding.IsTiled() && inst->shape().IsArray() && sharding.TiledDataRank() != inst->shape().rank()) {
    emit errorOccurred(QString("%1 has rank %2 but the sharding tiles %3 dimensions")
                           .arg(Q(inst->name())).arg(inst->shape().rank()).arg(sharding.TiledDataRank()));
    return false;
  }
  if (sharding.NumDevices() > mesh_.num_devices() && !sharding.IsTileMaximal()) {
    emit errorOccurred(QString("the sharding spans %1 devices but the mesh has %2")
                           .arg(sharding.NumDevices()).arg(mesh_.num_devices()));
    return false;
  }
  auto before = annotation(id);
  if (before && *before == sharding) return true;
  QString text = QString("Annotate %1").arg(Q(inst->name()));
  if (inst->shape().IsArray()) {
    auto named = ToNamedAxes(sharding, inst->shape().rank(), mesh_, inst->name());
    if (named.ok()) text = QString("Annotate %1").arg(Q(*named));
  }
  undo_stack_->push(new SetAnnotationCommand(this, id, before, sharding, text));
  return true;
}

bool DocumentModel::clearAnnotation(int64_t id) {
  const Instruction* inst = instruction(id);
  auto before = annotation(id);
  if (!inst || !before) return false;
  undo_stack_->push(new SetAnnotationCommand(this, id, before, std::nullopt,
                                             QString("Clear annotation of %1").arg(Q(inst->name()))));
  return true;
}

bool DocumentModel::setMesh(const DeviceMesh& mesh) {
  if (mesh.num_axes() == 0 || mesh.num_devices() < 1) {
    emit errorOccurred("a mesh needs at least one axis of size 1 or more");
    return false;
  }
  for (const auto& a : mesh.axes()) {
    if (a.name.empty() || a.size < 1) {
      emit errorOccurred("every mesh axis needs a name and a size of at least 1");
      return false;
    }
  }
  if (mesh == mesh_) return true;
  undo_stack_->push(new SetMeshCommand(this, mesh_, annotations_, mesh, remapAnnotations(mesh)));
  return true;
}

std::map<int64_t, HloSharding> DocumentModel::remapAnnotations(const DeviceMesh& new_mesh) const {
  std::map<int64_t, HloSharding> out;
  const bool same_axis_count = new_mesh.num_axes() == mesh_.num_axes();
  for (const auto& [id, s] : annotations_) {
    const Instruction* inst = instruction(id);
    if (!inst) continue;
    const Shape& shape = inst->shape();
    std::optional<std::vector<std::vector<std::string>>> names;
    if (shape.IsArray()) names = AxisNamesOf(s, shape.rank(), mesh_);
    if (names) {
      AxisAssignment assignment;
      for (const auto& dim : *names) {
        std::vector<int64_t> axes;
        for (const auto& n : dim) {
          int64_t a = new_mesh.AxisIndex(n);
          if (a < 0 && same_axis_count) a = mesh_.AxisIndex(n);  // renamed axis: keep its position
          if (a >= 0) axes.push_back(a);
        }
        assignment.dim_axes.push_back(std::move(axes));
      }
      auto remapped = MeshShard(shape.rank(), new_mesh, assignment);
      if (remapped.ok()) {
        out.emplace(id, *remapped);
        continue;
      }
    }
    // Not expressible over the mesh: keep it when the device count still fits.
    if (s.IsTileMaximal() || s.NumDevices() <= new_mesh.num_devices()) out.emplace(id, s);
  }
  return out;
}

void DocumentModel::applyAnnotation(int64_t id, const std::optional<HloSharding>& sharding) {
  if (sharding) {
    annotations_[id] = *sharding;
  } else {
    annotations_.erase(id);
  }
  ++edit_generation_;
  emit annotationsChanged();
}

void DocumentModel::applyMeshState(const DeviceMesh& mesh, const std::map<int64_t, HloSharding>& annotations) {
  const bool mesh_changed = !(mesh == mesh_);
  mesh_ = mesh;
  annotations_ = annotations;
  ++edit_generation_;
  if (mesh_changed) emit meshChanged();
  emit annotationsChanged();
}

// ---- Propagated shardings --------------------------------------------------------------------------

void DocumentModel::setPropagation(quint64 module_generation, quint64 edit_generation,
                                   std::unordered_map<int64_t, HloSharding> shardings,
                                   ExplainSteps why, const QString& summary) {
  if (module_generation != module_generation_) return;
  propagated_ = std::make_shared<const std::unordered_map<int64_t, HloSharding>>(std::move(shardings));
  why_ = std::move(why);
  propagation_summary_ = summary;
  propagated_edit_ = edit_generation;
  ++result_generation_;
  emit shardingsUpdated();
}

void DocumentModel::setPropagationFailed(quint64 module_generation, quint64 edit_generation, const QString& message) {
  if (module_generation != module_generation_) return;
  propagated_ = std::make_shared<const std::unordered_map<int64_t, HloSharding>>();
  why_.clear();
  propagation_summary_ = message;
  propagated_edit_ = edit_generation;
  ++result_generation_;
  emit shardingsUpdated();
}

std::optional<HloSharding> DocumentModel::sharding(int64_t id) const {
  if (const HloSharding* s = findSharding(id)) return *s;
  return std::nullopt;
}

const HloSharding* DocumentModel::findSharding(int64_t id) const {
  if (auto a = annotations_.find(id); a != annotations_.end()) return &a->second;
  if (auto t = propagated_->find(id); t != propagated_->end()) return &t->second;
  return nullptr;
}

TensorOrigin DocumentModel::origin(int64_t id) const {
  if (annotations_.count(id)) return TensorOrigin::kUser;
  if (propagated_->count(id)) return TensorOrigin::kInferred;
  return TensorOrigin::kNone;
}

std::vector<ExplainStep> DocumentModel::why(int64_t id) const {
  if (auto a = annotations_.find(id); a != annotations_.end()) {
    ExplainStep step;
    step.instruction = instruction(id);
    step.sharding = a->second.ToString();
    step.origin.direction = prop::Direction::kAnnotation;
    step.text = "annotated by you";
    return {step};
  }
  return ExplainChain(why_, id);
}

// ---- Selection -------------------------------------------------------------------------------------

void DocumentModel::select(int64_t id) {
  if (id != -1 && !instruction(id)) id = -1;
  if (id == selected_) return;
  selected_ = id;
  emit selectionChanged(id);
}

}  // namespace shardscope::views
