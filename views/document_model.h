// The document the views show and edit: the module, the device mesh, the user's annotations with
// their undo history, the selection, and the complete shardings propagation gave for them. Views
// read it and edit it only through its undoable operations; it runs nothing itself. The session
// (app/gui) loads modules into it and hands it the results of propagation, which it runs through
// the job tracker.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <QObject>
#include <QString>

#include "core/ir/ir.h"
#include "core/project/project_file.h"
#include "core/sharding/mesh.h"
#include "core/sharding/sharding.h"
#include "partitioner/propagation/sharding_propagation.h"

class QUndoStack;

namespace shardscope::views {

enum class TensorOrigin { kNone, kUser, kInferred };

class DocumentModel : public QObject {
  Q_OBJECT

 public:
  explicit DocumentModel(QObject* parent = nullptr);
  ~DocumentModel() override;

  // ---- The module ----
  // Takes a module; its instruction shardings become the user annotations. Clears the undo
  // history, the selection and the propagated shardings. `file_path`: the file it was read from
  // ("" for an example), known before moduleReset so every view reads the new title. A null
  // module is no module (clear()).
  void setModule(std::unique_ptr<Module> module, const DeviceMesh& mesh, const QString& source_kind,
                 const QString& source, const QString& file_path = QString());
  // The same for a module shared with its maker and left as it is (the partitioned program, which
  // the analysis holds: no copy of a 100k-instruction module); its shardings are the annotations.
  void showModule(std::shared_ptr<const Module> module, const DeviceMesh& mesh, const QString& source_kind,
                  const QString& source);
  // No module (File ▸ Close): every view shows its empty state.
  void clear();
  const Module* module() const { return module_.get(); }
  // The same module for a worker to read (it never changes while the document holds it).
  std::shared_ptr<const Module> sharedModule() const { return module_; }
  bool hasModule() const { return module_ != nullptr; }
  // Increments whenever a different module is loaded (views lay out again only then).
  quint64 moduleGeneration() const { return module_generation_; }
  const Instruction* instruction(int64_t id) const;
  const Instruction* findInstruction(const QString& name) const;
  // Name as used in project files: "name" in the entry computation, "computation/name" elsewhere.
  QString qualifiedName(const Instruction* inst) const;
  // A copy of the module with the annotations (and, when `with_inferred`, the propagated shardings)
  // on its instructions; and its HLO text.
  std::unique_ptr<Module> annotatedClone(bool with_inferred) const;
  QString moduleText(bool with_inferred = false) const;

  // Where it came from: "example", "hlo", "project", "spmd", "" and the example name or path; the
  // file it was last loaded from or saved to ("" for an example).
  QString sourceKind() const { return source_kind_; }
  QString source() const { return source_; }
  QString filePath() const { return file_path_; }
  void setFilePath(const QString& path);
  // The zoo settings the module was built with (an example, a paper configuration, a search
  // candidate; std::nullopt: not built by the zoo, e.g. a file): its numerical check at sizes too
  // large for the evaluator runs on a small twin built from them (app/pipeline/small_twin.h). Set
  // right after setModule; a new module clears them. Saved in projects.
  using ZooSettings = std::map<std::string, std::string, std::less<>>;
  const std::optional<ZooSettings>& zooSettings() const { return zoo_settings_; }
  void setZooSettings(ZooSettings settings) { zoo_settings_ = std::move(settings); }
  // The file's name, else the module's name; "" when there is no module.
  QString title() const;
  bool isModified() const;
  void setClean();  // saved

  // A document that only displays a module (the partitioned program) is not propagated and shows
  // no annotation origins.
  void setPropagationEnabled(bool on) { propagation_enabled_ = on; }
  bool propagationEnabled() const { return propagation_enabled_; }

  // ---- Analysis options, saved with the document ----
  // Weight-update sharding (paper 000): partitioning and simulation run the pass on the
  // data-parallel program. Undoable (marks the document modified); a new module starts with it off.
  bool weightUpdateSharding() const { return weight_update_sharding_; }
  void setWeightUpdateSharding(bool on);
  // Sets it without an undo step (undo/redo, a project being opened).
  void applyWeightUpdateSharding(bool on);
  // The simulated slice when the user overrides the generation's default (placement, wraparound,
  // torus shape; app/pipeline/slice_options.h interprets it). Undoable; a new module starts without.
  const ProjectSliceOverride& sliceOverride() const { return slice_override_; }
  void setSliceOverride(const ProjectSliceOverride& slice);
  void applySliceOverride(const ProjectSliceOverride& slice);  // no undo step
  // The sizes the simulation runs the model at when the user set other ones than the document's
  // (zoo settings for a module the zoo built, or every dimension scaled by k; the numerical check
  // stays on the document). Undoable; a new module starts without.
  const ProjectSimulatedSizes& simulatedSizes() const { return simulated_sizes_; }
  void setSimulatedSizes(const ProjectSimulatedSizes& sizes);
  void applySimulatedSizes(const ProjectSimulatedSizes& sizes);  // no undo step

  // ---- Mesh and annotations ----
  const DeviceMesh& mesh() const { return mesh_; }
  const std::map<int64_t, HloSharding>& annotations() const { return annotations_; }
  std::optional<HloSharding> annotation(int64_t id) const;
  // Increments with every change of the annotations or the mesh and with a new module: the state an
  // analysis was made from.
  quint64 editGeneration() const { return edit_generation_; }

  // Undoable edits. Return false (and emit errorOccurred) when the edit is invalid.
  bool annotate(int64_t id, const HloSharding& sharding);
  bool clearAnnotation(int64_t id);
  bool setMesh(const DeviceMesh& mesh);
  QUndoStack* undoStack() const { return undo_stack_; }

  // Raw setters used by the undo commands (no undo entry).
  void applyAnnotation(int64_t id, const std::optional<HloSharding>& sharding);
  void applyMeshState(const DeviceMesh& mesh, const std::map<int64_t, HloSharding>& annotations);
  // The annotations re-expressed over `new_mesh` (same named axes where they still exist).
  std::map<int64_t, HloSharding> remapAnnotations(const DeviceMesh& new_mesh) const;

  // ---- Propagated shardings ----
  // The shardings propagation completed for the annotations of edit `edit_generation` (every
  // instruction that has one) and each one's own reason (ShardingPropagation::ExplainOne; why()
  // follows them into a chain); the steps' instructions are this document's. Results for an older
  // module are ignored.
  void setPropagation(quint64 module_generation, quint64 edit_generation,
                      std::unordered_map<int64_t, HloSharding> shardings,
                      ExplainSteps why, const QString& summary);
  // Propagation failed: the annotations stay the only shardings known.
  void setPropagationFailed(quint64 module_generation, quint64 edit_generation, const QString& message);
  // The sharding every tensor ends up with: the user's, else the propagated one, else nullopt.
  std::optional<HloSharding> sharding(int64_t id) const;
  // The same without a copy: the annotation or propagated sharding, nullptr when none. Valid until
  // the annotations or the propagation change.
  const HloSharding* findSharding(int64_t id) const;
  TensorOrigin origin(int64_t id) const;
  // Why `id` is sharded as it is, nearest cause first (an annotation: one step).
  std::vector<ExplainStep> why(int64_t id) const;
  QString propagationSummary() const { return propagation_summary_; }
  // Incremented each time propagation results are applied.
  quint64 resultGeneration() const { return result_generation_; }
  // The edit the propagated shardings belong to; equal to editGeneration() when they are current.
  quint64 propagatedEdit() const { return propagated_edit_; }
  // Every propagated sharding by instruction id (annotations included), for a worker to read.
  std::shared_ptr<const std::unordered_map<int64_t, HloSharding>> propagatedShardings() const { return propagated_; }

  // ---- Selection ----
  int64_t selected() const { return selected_; }
  void select(int64_t id);

 signals:
  void moduleReset();        // a different module: lay out again
  void meshChanged();
  void annotationsChanged();
  void shardingsUpdated();   // new propagation results: recolour
  void selectionChanged(qint64 id);
  void errorOccurred(const QString& message);
  void modifiedChanged(bool modified);
  void weightUpdateShardingChanged(bool on);
  void sliceOverrideChanged();
  void simulatedSizesChanged();
  void filePathChanged();    // saved under another name

 private:
  void reset(std::shared_ptr<const Module> module, std::map<int64_t, HloSharding> annotations, const DeviceMesh& mesh,
             const QString& source_kind, const QString& source, const QString& file_path);
  void rebuildIndex();

  std::shared_ptr<const Module> module_;  // shardings stripped (setModule) or left (showModule): annotations_ holds them
  DeviceMesh mesh_;
  std::map<int64_t, HloSharding> annotations_;
  std::unordered_map<int64_t, const Instruction*> by_id_;
  quint64 module_generation_ = 0;
  quint64 edit_generation_ = 0;
  QString file_path_, source_kind_, source_;
  std::optional<ZooSettings> zoo_settings_;
  QUndoStack* undo_stack_ = nullptr;
  int64_t selected_ = -1;
  bool propagation_enabled_ = true;
  bool weight_update_sharding_ = false;
  ProjectSliceOverride slice_override_;
  ProjectSimulatedSizes simulated_sizes_;

  std::shared_ptr<const std::unordered_map<int64_t, HloSharding>> propagated_;
  ExplainSteps why_;  // each instruction's own step; why() follows them (ExplainChain)
  QString propagation_summary_;
  quint64 result_generation_ = 0;
  quint64 propagated_edit_ = 0;
};

}  // namespace shardscope::views
