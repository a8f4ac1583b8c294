#include "views/document.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFile>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSaveFile>
#include <QThreadPool>
#include <QTimer>
#include <QUndoCommand>
#include <QUndoStack>
#include <QtConcurrent/QtConcurrentRun>

namespace shardscope::views {

namespace {

constexpr const char* kProjectFormat = "shardscope-project";
constexpr int kProjectVersion = 1;

QString Q(const std::string& s) { return QString::fromStdString(s); }

class SetAnnotationCommand : public QUndoCommand {
 public:
  SetAnnotationCommand(Document* doc, int64_t id, std::optional<HloSharding> before,
                       std::optional<HloSharding> after, const QString& text)
      : QUndoCommand(text), doc_(doc), id_(id), before_(std::move(before)), after_(std::move(after)) {}
  void redo() override { doc_->applyAnnotation(id_, after_); }
  void undo() override { doc_->applyAnnotation(id_, before_); }

 private:
  Document* doc_;
  int64_t id_;
  std::optional<HloSharding> before_, after_;
};

class SetMeshCommand : public QUndoCommand {
 public:
  SetMeshCommand(Document* doc, DeviceMesh before_mesh, std::map<int64_t, HloSharding> before,
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
  Document* doc_;
  DeviceMesh before_mesh_, after_mesh_;
  std::map<int64_t, HloSharding> before_, after_;
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

Document::Document(QObject* parent)
    : QObject(parent),
      undo_stack_(new QUndoStack(this)),
      pool_(new QThreadPool(this)),
      latest_request_(std::make_shared<std::atomic<quint64>>(0)) {
  pool_->setMaxThreadCount(1);
  pool_->setExpiryTimeout(-1);
  connect(undo_stack_, &QUndoStack::cleanChanged, this, [this](bool clean) { emit modifiedChanged(!clean); });
}

Document::~Document() {
  // Results that arrive after this point are dropped; wait so no worker outlives the session.
  latest_request_->store(~quint64{0});
  pool_->waitForDone();
}

QString Document::title() const {
  if (!module_) return "ShardScope";
  if (!file_path_.isEmpty()) return QFileInfo(file_path_).fileName();
  return Q(module_->name());
}

bool Document::isModified() const { return !undo_stack_->isClean(); }

// ---- Loading -------------------------------------------------------------------------------------

Status Document::loadExample(const QString& name) {
  auto built = BuildExample(name.toStdString());
  if (!built.ok()) return built.error();
  setModule(std::move(built->module), built->mesh, "example", name);
  file_path_.clear();
  return Status::Ok();
}

Status Document::loadHloText(const QString& text, const QString& filename) {
  auto parsed = ParseModuleText(text.toStdString(), filename.toStdString());
  if (!parsed.ok()) return parsed.error();
  DeviceMesh mesh = GuessMesh(**parsed);
  setModule(std::move(*parsed), mesh, "hlo", filename);
  return Status::Ok();
}

Status Document::loadHloFile(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) {
    return Error(QString("%1: cannot open: %2").arg(path, f.errorString()).toStdString());
  }
  const QByteArray bytes = f.readAll();
  Status st = loadHloText(QString::fromUtf8(bytes), path);
  if (st.ok()) file_path_ = path;
  return st;
}

void Document::setModule(std::unique_ptr<Module> module, const DeviceMesh& mesh, const QString& source_kind,
                         const QString& source) {
  // Invalidate anything in flight for the old module.
  latest_request_->store(++request_generation_);
  module_ = std::move(module);
  mesh_ = mesh;
  annotations_.clear();
  for (const auto& comp : module_->computations()) {
    for (const auto& inst : comp->instructions()) {
      if (inst->has_sharding()) {
        annotations_.emplace(inst->id(), *inst->sharding());
        inst->clear_sharding();
      }
    }
  }
  source_kind_ = source_kind;
  source_ = source;
  selected_ = -1;
  propagation_ = PropagationOutput{};
  partition_ = PartitionOutput{};
  simulation_ = SimulationOutput{};
  runs_.clear();
  ++module_generation_;
  rebuildIndex();
  undo_stack_->clear();
  resetSession();
  emit moduleReset();
  emit meshChanged();
  emit annotationsChanged();
  emit selectionChanged(-1);
  schedulePropagation();
}

void Document::rebuildIndex() {
  by_id_.clear();
  if (!module_) return;
  for (const auto& comp : module_->computations()) {
    for (const auto& inst : comp->instructions()) by_id_.emplace(inst->id(), inst.get());
  }
}

const Instruction* Document::instruction(int64_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

const Instruction* Document::findInstruction(const QString& name) const {
  if (!module_) return nullptr;
  return module_->FindInstruction(name.toStdString());
}

QString Document::qualifiedName(const Instruction* inst) const {
  if (!inst) return {};
  if (inst->parent() && module_ && inst->parent() != module_->entry()) {
    return Q(inst->parent()->name()) + "/" + Q(inst->name());
  }
  return Q(inst->name());
}

std::unique_ptr<Module> Document::annotatedClone(bool with_inferred) const {
  if (!module_) return nullptr;
  auto clone = module_->Clone();
  for (const auto& comp : clone->computations()) {
    for (const auto& inst : comp->instructions()) {
      auto a = annotations_.find(inst->id());
      if (a != annotations_.end()) {
        inst->set_sharding(a->second);
      } else if (with_inferred) {
        auto t = propagation_.tensors.find(inst->id());
        if (t != propagation_.tensors.end()) inst->set_sharding(t->second.sharding);
      }
    }
  }
  return clone;
}

QString Document::moduleText(bool with_inferred) const {
  auto clone = annotatedClone(with_inferred);
  return clone ? Q(PrintModuleText(*clone)) : QString();
}

// ---- Project files -------------------------------------------------------------------------------

QByteArray Document::projectJson() const {
  QJsonObject root;
  root["format"] = kProjectFormat;
  root["version"] = kProjectVersion;
  if (module_) {
    QJsonObject src;
    src["kind"] = source_kind_;
    src["source"] = source_;
    root["source"] = src;
    root["mesh"] = Q(mesh_.ToString());
    QJsonArray order;
    for (int64_t d : mesh_.device_order()) order.append(static_cast<qint64>(d));
    root["mesh_devices"] = order;
    root["module"] = Q(PrintModuleText(*module_));
    QJsonArray anns;
    for (const auto& [id, s] : annotations_) {
      const Instruction* inst = instruction(id);
      if (!inst) continue;
      QJsonObject a;
      a["instruction"] = qualifiedName(inst);
      a["sharding"] = Q(s.ToString());
      if (inst->shape().IsArray()) {
        auto named = ToNamedAxes(s, inst->shape().rank(), mesh_, inst->name());
        if (named.ok()) a["named"] = Q(*named);
      }
      anns.append(a);
    }
    root["annotations"] = anns;
    if (const Instruction* sel = instruction(selected_)) root["selected"] = qualifiedName(sel);
  }
  return QJsonDocument(root).toJson(QJsonDocument::Indented);
}

Status Document::saveProject(const QString& path) {
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly)) {
    return Error(QString("%1: cannot write: %2").arg(path, f.errorString()).toStdString());
  }
  const QByteArray json = projectJson();
  if (f.write(json) != json.size() || !f.commit()) {
    return Error(QString("%1: cannot write: %2").arg(path, f.errorString()).toStdString());
  }
  file_path_ = path;
  undo_stack_->setClean();
  return Status::Ok();
}

Status Document::loadProject(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) {
    return Error(QString("%1: cannot open: %2").arg(path, f.errorString()).toStdString());
  }
  Status st = loadProjectJson(f.readAll(), path);
  if (st.ok()) file_path_ = path;
  return st;
}

Status Document::loadProjectJson(const QByteArray& json, const QString& where) {
  auto fail = [&](const QString& msg) { return Status(Error((where + ": " + msg).toStdString())); };
  QJsonParseError perr;
  const QJsonDocument doc = QJsonDocument::fromJson(json, &perr);
  if (doc.isNull()) {
    // Translate the byte offset into line:column for the message.
    int line = 1, col = 1;
    for (int i = 0; i < perr.offset && i < json.size(); ++i) {
      if (json[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    return Error(QString("%1:%2:%3: error: not valid JSON: %4").arg(where).arg(line).arg(col)
                     .arg(perr.errorString()).toStdString());
  }
  const QJsonObject root = doc.object();
  if (root["format"].toString() != kProjectFormat) return fail("not a ShardScope project (format is not \"shardscope-project\")");
  if (root["version"].toInt() > kProjectVersion) {
    return fail(QString("written by a newer ShardScope (project version %1; this one reads up to %2)")
                    .arg(root["version"].toInt()).arg(kProjectVersion));
  }
  auto parsed = ParseModuleText(root["module"].toString().toStdString(), (where + "#module").toStdString());
  if (!parsed.ok()) return fail("the embedded module does not parse: " + Q(parsed.error().message));
  auto mesh = DeviceMesh::Parse(root["mesh"].toString().toStdString());
  if (!mesh.ok()) return fail("bad mesh \"" + root["mesh"].toString() + "\": " + Q(mesh.error().message));
  DeviceMesh m = *mesh;
  const QJsonArray order = root["mesh_devices"].toArray();
  if (!order.isEmpty()) {
    std::vector<int64_t> devices;
    for (const auto& v : order) devices.push_back(v.toInteger());
    if (static_cast<int64_t>(devices.size()) != m.num_devices()) {
      return fail(QString("mesh_devices lists %1 devices but the mesh has %2").arg(devices.size()).arg(m.num_devices()));
    }
    m = DeviceMesh(m.axes(), devices);
  }
  std::unique_ptr<Module> module = std::move(*parsed);
  // Annotations are applied to the module before it is adopted, so setModule picks them up.
  for (const auto& v : root["annotations"].toArray()) {
    const QJsonObject a = v.toObject();
    const QString name = a["instruction"].toString();
    Instruction* inst = module->FindInstruction(name.toStdString());
    if (!inst) return fail("annotation for unknown instruction \"" + name + "\"");
    auto s = HloSharding::Parse(a["sharding"].toString().toStdString());
    if (!s.ok()) return fail("bad sharding for \"" + name + "\": " + Q(s.error().message));
    inst->set_sharding(*s);
  }
  const QJsonObject src = root["source"].toObject();
  setModule(std::move(module), m, src["kind"].toString(), src["source"].toString());
  if (root.contains("selected")) {
    if (const Instruction* sel = findInstruction(root["selected"].toString())) select(sel->id());
  }
  return Status::Ok();
}

// ---- Annotations and mesh -------------------------------------------------------------------------

std::optional<HloSharding> Document::annotation(int64_t id) const {
  auto it = annotations_.find(id);
  if (it == annotations_.end()) return std::nullopt;
  return it->second;
}

bool Document::annotate(int64_t id, const HloSharding& sharding) {
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

bool Document::clearAnnotation(int64_t id) {
  const Instruction* inst = instruction(id);
  auto before = annotation(id);
  if (!inst || !before) return false;
  undo_stack_->push(new SetAnnotationCommand(this, id, before, std::nullopt,
                                             QString("Clear annotation of %1").arg(Q(inst->name()))));
  return true;
}

bool Document::setMesh(const DeviceMesh& mesh) {
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

std::map<int64_t, HloSharding> Document::remapAnnotations(const DeviceMesh& new_mesh) const {
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

void Document::applyAnnotation(int64_t id, const std::optional<HloSharding>& sharding) {
  if (sharding) {
    annotations_[id] = *sharding;
  } else {
    annotations_.erase(id);
  }
  emit annotationsChanged();
  schedulePropagation();
}

void Document::applyMeshState(const DeviceMesh& mesh, const std::map<int64_t, HloSharding>& annotations) {
  const bool mesh_changed = !(mesh == mesh_);
  mesh_ = mesh;
  annotations_ = annotations;
  if (mesh_changed) {
    resetSession();
    emit meshChanged();
  }
  emit annotationsChanged();
  schedulePropagation();
}

// ---- Propagation -----------------------------------------------------------------------------------

std::optional<HloSharding> Document::sharding(int64_t id) const {
  auto a = annotations_.find(id);
  if (a != annotations_.end()) return a->second;
  auto t = propagation_.tensors.find(id);
  if (t != propagation_.tensors.end()) return t->second.sharding;
  return std::nullopt;
}

TensorOrigin Document::origin(int64_t id) const {
  if (annotations_.count(id)) return TensorOrigin::kUser;
  if (propagation_.tensors.count(id)) return TensorOrigin::kInferred;
  return TensorOrigin::kNone;
}

std::vector<WhyStep> Document::why(int64_t id) const {
  auto t = propagation_.tensors.find(id);
  if (t != propagation_.tensors.end() && !annotations_.count(id)) return t->second.why;
  if (auto a = annotations_.find(id); a != annotations_.end()) {
    WhyStep w;
    w.instruction_id = id;
    w.instruction = instruction(id) ? instruction(id)->name() : "";
    w.sharding = a->second.ToString();
    w.direction = "annotation";
    w.text = "annotated by you";
    return {w};
  }
  return {};
}

void Document::resetSession() {
  if (!module_ || !propagation_enabled_) {
    session_.reset();
    return;
  }
  session_ = std::make_shared<PropagationSession>(module_->Clone(), mesh_);
}

void Document::schedulePropagation() {
  if (!module_ || !propagation_enabled_) return;
  // Coalesce bursts of edits (undo of a macro, a mesh change) into one request.
  latest_request_->store(++request_generation_);
  if (propagation_scheduled_) return;
  propagation_scheduled_ = true;
  if (pending_++ == 0) emit busyChanged(true);
  QTimer::singleShot(0, this, [this] {
    propagation_scheduled_ = false;
    startPropagation();
    if (--pending_ == 0) emit busyChanged(false);
  });
}

void Document::startPropagation() {
  if (!module_ || !session_) return;
  const quint64 gen = request_generation_;
  latest_request_->store(gen);
  auto session = session_;
  auto latest = latest_request_;
  auto annotations = annotations_;
  if (pending_++ == 0) emit busyChanged(true);
  auto* watcher = new QFutureWatcher<PropagationOutput>(this);
  connect(watcher, &QFutureWatcher<PropagationOutput>::finished, this, [this, watcher, gen] {
    watcher->deleteLater();
    const bool current = gen == request_generation_;
    if (current) {
      propagation_ = watcher->result();
      ++result_generation_;
      emit shardingsUpdated();
    }
    if (--pending_ == 0) emit busyChanged(false);
  });
  watcher->setFuture(QtConcurrent::run(pool_, [session, latest, annotations, gen]() -> PropagationOutput {
    if (latest->load() != gen) {
      PropagationOutput skipped;
      skipped.ok = false;
      skipped.message = "superseded";
      return skipped;
    }
    return session->Run(annotations);
  }));
}

bool Document::waitUntilIdle(int timeout_ms) {
  if (!isBusy() && !partitionBusy() && !simulationBusy()) return true;
  QEventLoop loop;
  QTimer timer;
  timer.setSingleShot(true);
  connect(&timer, &QTimer::timeout, &loop, &QEventLoop::quit);
  auto check = [&] {
    if (!isBusy() && !partitionBusy() && !simulationBusy()) loop.quit();
  };
  connect(this, &Document::busyChanged, &loop, check);
  connect(this, &Document::partitionUpdated, &loop, check);
  connect(this, &Document::simulationUpdated, &loop, check);
  timer.start(timeout_ms);
  loop.exec();
  return !isBusy() && !partitionBusy() && !simulationBusy();
}

// ---- Partitioning ----------------------------------------------------------------------------------

void Document::requestPartition() {
  if (!module_) return;
  const quint64 gen = ++partition_generation_;
  auto clone = std::shared_ptr<Module>(annotatedClone(/*with_inferred=*/true).release());
  DeviceMesh mesh = mesh_;
  ++partition_pending_;
  auto* watcher = new QFutureWatcher<PartitionOutput>(this);
  connect(watcher, &QFutureWatcher<PartitionOutput>::finished, this, [this, watcher, gen] {
    watcher->deleteLater();
    --partition_pending_;
    if (gen == partition_generation_) {
      partition_ = watcher->result();
      emit partitionUpdated();
    }
  });
  watcher->setFuture(QtConcurrent::run(pool_, [clone, mesh]() -> PartitionOutput {
    return RunPartitioner(clone->Clone(), mesh);
  }));
}

// ---- Simulation -----------------------------------------------------------------------------------

void Document::requestSimulation(const QString& chip_name) {
  if (!module_) return;
  const quint64 gen = ++simulation_generation_;
  const std::string chip = chip_name.isEmpty() ? DefaultChip() : chip_name.toStdString();
  auto clone = std::shared_ptr<Module>(annotatedClone(/*with_inferred=*/true).release());
  DeviceMesh mesh = mesh_;
  const std::string label = QString("%1 on %2, mesh %3, %4 annotations")
                                .arg(QString::fromStdString(module_->name()), QString::fromStdString(chip),
                                     QString::fromStdString(mesh_.ToString()))
                                .arg(annotations_.size())
                                .toStdString();
  ++simulation_pending_;
  auto* watcher = new QFutureWatcher<SimulationOutput>(this);
  connect(watcher, &QFutureWatcher<SimulationOutput>::finished, this, [this, watcher, gen] {
    watcher->deleteLater();
    --simulation_pending_;
    if (gen != simulation_generation_) return;
    simulation_ = watcher->result();
    if (simulation_.ok && simulation_.run) {
      auto run = std::make_shared<RunResult>(*simulation_.run);
      run->id = static_cast<int64_t>(runs_.size()) + 1;
      run->created_unix_ms = QDateTime::currentMSecsSinceEpoch();
      simulation_.run = run;
      runs_.push_back(run);
      emit runAdded(run->id);
    }
    emit simulationUpdated();
  });
  watcher->setFuture(QtConcurrent::run(pool_, [clone, mesh, chip, label]() -> SimulationOutput {
    return RunSimulation(clone->Clone(), mesh, chip, label);
  }));
}

// ---- Selection -------------------------------------------------------------------------------------

void Document::select(int64_t id) {
  if (id != -1 && !instruction(id)) id = -1;
  if (id == selected_) return;
  selected_ = id;
  emit selectionChanged(id);
}

}  // namespace shardscope::views
