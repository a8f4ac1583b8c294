#include "views/document.h"

#include <algorithm>

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFile>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSaveFile>
#include <QStandardPaths>
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
      latest_request_(std::make_shared<std::atomic<quint64>>(0)),
      simulation_latest_(std::make_shared<std::atomic<quint64>>(0)),
      store_pool_(new QThreadPool(this)),
      store_slot_(std::make_shared<StoreSlot>()) {
  pool_->setMaxThreadCount(1);
  pool_->setExpiryTimeout(-1);
  store_pool_->setMaxThreadCount(1);
  store_pool_->setExpiryTimeout(-1);
  connect(undo_stack_, &QUndoStack::cleanChanged, this, [this](bool clean) { emit modifiedChanged(!clean); });
}

Document::~Document() {
  // Results that arrive after this point are dropped; wait so no worker outlives the session.
  latest_request_->store(~quint64{0});
  simulation_latest_->store(~quint64{0});
  pool_->waitForDone();
  store_pool_->waitForDone();
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

// A project file read into plain data (no Document state: runs on a worker thread).
struct Document::ParsedProject {
  std::unique_ptr<Module> module;  // its instructions carry the annotations
  DeviceMesh mesh;
  QString source_kind, source, selected;
};

bool Document::IsProjectFile(const QString& path) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  return suffix == "shardscope" || suffix == "json";
}

void Document::requestLoadFile(const QString& path) {
  struct Loaded {
    // Copyable holders (QFuture results are copied) that hand the parsed data over without a clone.
    std::shared_ptr<std::unique_ptr<Module>> module;  // an HLO file
    std::shared_ptr<ParsedProject> project;          // a project file
    DeviceMesh mesh;
    QString error;
  };
  const bool project = IsProjectFile(path);
  const quint64 gen = ++load_generation_;
  load_active_ = true;
  auto* watcher = new QFutureWatcher<Loaded>(this);
  connect(watcher, &QFutureWatcher<Loaded>::finished, this, [this, watcher, gen, path] {
    watcher->deleteLater();
    if (gen != load_generation_) return;  // cancelled or superseded
    load_active_ = false;
    Loaded r = watcher->result();
    if (r.project) {
      adoptProject(std::move(*r.project));
      file_path_ = path;
      setRunStoreProject(path, /*carry_session_runs=*/false);
    } else if (r.module && *r.module) {
      setModule(std::move(*r.module), r.mesh, "hlo", path);
      file_path_ = path;
    } else {
      emit loadFinished(path, false, r.error);
      return;
    }
    emit loadFinished(path, true, QString());
  });
  watcher->setFuture(QtConcurrent::run(pool_, [path, project]() -> Loaded {
    Loaded r;
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
      r.error = QString("%1: cannot open: %2").arg(path, f.errorString());
      return r;
    }
    const QByteArray bytes = f.readAll();
    if (project) {
      auto parsed = ParseProject(bytes, path);
      if (!parsed.ok()) {
        r.error = QString::fromStdString(parsed.error().message);
        return r;
      }
      r.project = std::make_shared<ParsedProject>(std::move(*parsed));
      return r;
    }
    auto parsed = ParseModuleText(QString::fromUtf8(bytes).toStdString(), path.toStdString());
    if (!parsed.ok()) {
      r.error = QString::fromStdString(parsed.error().message);
      return r;
    }
    r.mesh = GuessMesh(**parsed);
    r.module = std::make_shared<std::unique_ptr<Module>>(std::move(*parsed));
    return r;
  }));
}

void Document::cancelLoad() {
  if (!load_active_) return;
  load_active_ = false;
  ++load_generation_;
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
  // The run history stays (it is the store's); only the document's link to a project store goes.
  run_project_file_.clear();
  if (store_enabled_) scheduleRunStoreRefresh();
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
  setRunStoreProject(path, /*carry_session_runs=*/true);
  return Status::Ok();
}

Status Document::loadProject(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) {
    return Error(QString("%1: cannot open: %2").arg(path, f.errorString()).toStdString());
  }
  Status st = loadProjectJson(f.readAll(), path);
  if (st.ok()) {
    file_path_ = path;
    setRunStoreProject(path, /*carry_session_runs=*/false);
  }
  return st;
}


Result<Document::ParsedProject> Document::ParseProject(const QByteArray& json, const QString& where) {
  auto fail = [&](const QString& msg) { return Error((where + ": " + msg).toStdString()); };
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
  ParsedProject p;
  p.mesh = *mesh;
  const QJsonArray order = root["mesh_devices"].toArray();
  if (!order.isEmpty()) {
    std::vector<int64_t> devices;
    for (const auto& v : order) devices.push_back(v.toInteger());
    if (static_cast<int64_t>(devices.size()) != p.mesh.num_devices()) {
      return fail(QString("mesh_devices lists %1 devices but the mesh has %2").arg(devices.size()).arg(p.mesh.num_devices()));
    }
    p.mesh = DeviceMesh(p.mesh.axes(), devices);
  }
  p.module = std::move(*parsed);
  // Annotations are applied to the module before it is adopted, so setModule picks them up.
  for (const auto& v : root["annotations"].toArray()) {
    const QJsonObject a = v.toObject();
    const QString name = a["instruction"].toString();
    Instruction* inst = p.module->FindInstruction(name.toStdString());
    if (!inst) return fail("annotation for unknown instruction \"" + name + "\"");
    auto s = HloSharding::Parse(a["sharding"].toString().toStdString());
    if (!s.ok()) return fail("bad sharding for \"" + name + "\": " + Q(s.error().message));
    inst->set_sharding(*s);
  }
  const QJsonObject src = root["source"].toObject();
  p.source_kind = src["kind"].toString();
  p.source = src["source"].toString();
  if (root.contains("selected")) p.selected = root["selected"].toString();
  return p;
}

Status Document::loadProjectJson(const QByteArray& json, const QString& where) {
  auto parsed = ParseProject(json, where);
  if (!parsed.ok()) return parsed.error();
  adoptProject(std::move(*parsed));
  return Status::Ok();
}

void Document::adoptProject(ParsedProject p) {
  setModule(std::move(p.module), p.mesh, p.source_kind, p.source);
  if (!p.selected.isEmpty()) {
    if (const Instruction* sel = findInstruction(p.selected)) select(sel->id());
  }
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
  auto idle = [this] {
    return !isBusy() && !partitionBusy() && !simulationBusy() && !runStoreBusy() && !store_refresh_scheduled_;
  };
  if (idle()) return true;
  QEventLoop loop;
  QTimer timer;
  timer.setSingleShot(true);
  connect(&timer, &QTimer::timeout, &loop, &QEventLoop::quit);
  // Polled as well: a state can change without one of the signals below (a coalesced refresh).
  QTimer poll;
  auto check = [&] {
    if (idle()) loop.quit();
  };
  connect(&poll, &QTimer::timeout, &loop, check);
  connect(this, &Document::busyChanged, &loop, check);
  connect(this, &Document::partitionUpdated, &loop, check);
  connect(this, &Document::simulationUpdated, &loop, check);
  connect(this, &Document::simulationCancelled, &loop, check);
  connect(this, &Document::runStoreBusyChanged, &loop, check);
  timer.start(timeout_ms);
  poll.start(50);
  loop.exec();
  return idle();
}

// ---- Partitioning ----------------------------------------------------------------------------------

void Document::requestPartition() {
  if (!module_) return;
  const quint64 gen = ++partition_generation_;
  auto clone = std::shared_ptr<Module>(annotatedClone(/*with_inferred=*/true).release());
  DeviceMesh mesh = mesh_;
  ++partition_pending_;
  partition_active_ = true;
  auto* watcher = new QFutureWatcher<PartitionOutput>(this);
  connect(watcher, &QFutureWatcher<PartitionOutput>::finished, this, [this, watcher, gen] {
    watcher->deleteLater();
    --partition_pending_;
    if (gen == partition_generation_) {
      partition_active_ = false;
      partition_ = watcher->result();
      emit partitionUpdated();
    }
  });
  watcher->setFuture(QtConcurrent::run(pool_, [clone, mesh]() -> PartitionOutput {
    return RunPartitioner(clone->Clone(), mesh);
  }));
}

void Document::cancelPartition() {
  if (!partition_active_) return;
  partition_active_ = false;
  ++partition_generation_;  // the running job's result no longer matches
  emit partitionCancelled();
}

// ---- Simulation -----------------------------------------------------------------------------------

struct Document::StoreSlot {
  std::shared_ptr<RunDatabase> db;  // null when the store could not be opened
  std::string path;
  std::string error;
};

// What a store operation hands back to the GUI thread (one shape for every operation).
struct Document::StoreReply {
  bool ok = true;
  std::string error;
  std::string path;                       // open: the store in use ("" when it failed)
  std::vector<RunOverview> runs;          // open / list
  std::shared_ptr<RunResult> run;         // load / save
  int64_t id = 0;                         // save: the new id
  std::optional<RunComparison> comparison;
  std::vector<std::pair<int64_t, int64_t>> carried;  // open: session run id -> id in the new store
};

namespace {
// The store's runs into a reply; ok = false with the reason when they cannot be listed.
template <typename Reply>
void ListRunsInto(RunDatabase& db, Reply& r) {
  auto runs = db.List();
  if (!runs.ok()) {
    r.ok = false;
    r.error = runs.error().message;
    return;
  }
  r.runs = std::move(*runs);
}
}  // namespace

template <typename Work, typename Done>
void Document::onStore(Work work, Done done) {
  if (store_pending_++ == 0) emit runStoreBusyChanged(true);
  auto* watcher = new QFutureWatcher<StoreReply>(this);
  connect(watcher, &QFutureWatcher<StoreReply>::finished, this, [this, watcher, done] {
    watcher->deleteLater();
    done(watcher->result());
    if (--store_pending_ == 0) emit runStoreBusyChanged(false);
  });
  watcher->setFuture(QtConcurrent::run(store_pool_, std::move(work)));
}

void Document::requestSimulation(const QString& chip_name, SimulationInput input) {
  if (!module_) return;
  openRunStore();
  const quint64 gen = ++simulation_generation_;
  simulation_latest_->store(gen);
  const std::string chip = chip_name.isEmpty() ? DefaultChip() : chip_name.toStdString();
  const bool replicated = input == SimulationInput::kReplicated;
  // module_ carries no shardings (annotations_ holds them): its clone is the replicated baseline.
  auto clone = std::shared_ptr<Module>(replicated ? module_->Clone().release() : annotatedClone(/*with_inferred=*/true).release());
  DeviceMesh mesh = mesh_;
  const QString what = replicated ? QString("replicated (no shardings)") : QString("%1 annotations").arg(annotations_.size());
  const std::string label = QString("%1 on %2, mesh %3, %4")
                                .arg(QString::fromStdString(module_->name()), QString::fromStdString(chip),
                                     QString::fromStdString(mesh_.ToString()), what)
                                .toStdString();
  simulation_active_ = true;
  auto latest = simulation_latest_;
  auto* watcher = new QFutureWatcher<SimulationOutput>(this);
  connect(watcher, &QFutureWatcher<SimulationOutput>::finished, this, [this, watcher, gen] {
    watcher->deleteLater();
    if (gen != simulation_generation_) return;  // cancelled or superseded
    finishSimulation(gen, watcher->result());
  });
  watcher->setFuture(QtConcurrent::run(pool_, [clone, mesh, chip, label, latest, gen]() -> SimulationOutput {
    if (latest->load() != gen) {
      SimulationOutput skipped;
      skipped.message = "cancelled";
      return skipped;
    }
    return RunSimulation(clone->Clone(), mesh, chip, label);
  }));
}

void Document::finishSimulation(quint64 gen, SimulationOutput out) {
  if (!out.ok || !out.run) {
    simulation_ = std::move(out);
    simulation_active_ = false;
    emit simulationUpdated();
    return;
  }
  // Saved on the store's thread; the run is adopted once it has its id.
  auto run = std::make_shared<RunResult>(*out.run);
  run->created_unix_ms = QDateTime::currentMSecsSinceEpoch();
  auto pending = std::make_shared<SimulationOutput>(std::move(out));
  auto slot = store_slot_;
  auto latest = simulation_latest_;
  onStore(
      [slot, run, latest, gen]() -> StoreReply {
        StoreReply r;
        r.run = run;
        if (!slot->db) {
          r.ok = false;
          r.error = slot->error.empty() ? "no run store is open" : slot->error;
          return r;
        }
        auto id = slot->db->Save(*run, [latest, gen] { return latest->load() != gen; });
        if (!id.ok()) {
          r.ok = false;
          r.error = id.error().message;
          return r;
        }
        r.id = *id;
        return r;
      },
      [this, gen, pending](StoreReply r) {
        if (gen != simulation_generation_) return;  // cancelled while saving: nothing was stored
        if (r.ok) {
          r.run->id = r.id;
        } else {
          r.run->id = next_memory_id_--;
          const QString msg = "Runs are kept in memory only (lost when ShardScope closes): " + Q(r.error);
          if (store_error_ != msg) {
            store_error_ = msg;
            emit runStoreChanged();
          }
        }
        pending->run = r.run;
        simulation_ = std::move(*pending);
        simulation_active_ = false;
        adoptRun(r.run);
        emit simulationUpdated();
      });
}

void Document::adoptRun(std::shared_ptr<RunResult> run) {
  const int64_t id = run->id;
  history_.push_back(OverviewOf(*run));
  session_runs_.push_back(id);
  cacheRun(std::move(run));
  emit runAdded(id);
}

void Document::cancelSimulation() {
  if (!simulation_active_) return;
  ++simulation_generation_;
  simulation_latest_->store(simulation_generation_);
  simulation_active_ = false;
  emit simulationCancelled();
}

// ---- Run store ------------------------------------------------------------------------------------

QString Document::chooseRunStorePath(const QString& project_file) {
  const QString env = qEnvironmentVariable("SHARDSCOPE_RUN_DB");
  if (!env.isEmpty()) return env;
  if (!project_file.isEmpty()) return Q(RunDatabase::ProjectStorePath(project_file.toStdString()));
  const QString dir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
  return QDir(dir.isEmpty() ? QDir::homePath() + "/.shardscope" : dir).filePath("runs.sqlite");
}

void Document::openRunStore() {
  if (store_enabled_) return;
  store_enabled_ = true;
  refreshRunStore();
}

void Document::scheduleRunStoreRefresh() {
  if (store_refresh_scheduled_) return;
  store_refresh_scheduled_ = true;
  QTimer::singleShot(0, this, [this] {
    store_refresh_scheduled_ = false;
    refreshRunStore();
  });
}

void Document::setRunStoreProject(const QString& project_file, bool carry_session_runs) {
  run_project_file_ = project_file;
  carry_on_refresh_ = carry_on_refresh_ || carry_session_runs;
  if (store_enabled_) scheduleRunStoreRefresh();
}

void Document::refreshRunStore() {
  if (!store_enabled_) return;
  const QString path = chooseRunStorePath(run_project_file_);
  const bool carry = carry_on_refresh_;
  carry_on_refresh_ = false;
  if (path == store_requested_) {
    relistRuns();
    return;
  }
  store_requested_ = path;
  const quint64 gen = ++store_generation_;
  // Runs of this session go along into a newly saved project's store, so saving a project does not
  // empty the history: the ones in memory as they are, the others read from the old store.
  std::vector<std::pair<int64_t, std::shared_ptr<const RunResult>>> carried;
  if (carry) {
    for (int64_t id : session_runs_) carried.emplace_back(id, loadedRun(id));
  }
  auto slot = store_slot_;
  const std::string p = path.toStdString();
  onStore(
      [slot, p, carried]() -> StoreReply {
        StoreReply r;
        std::shared_ptr<RunDatabase> old = slot->db;
        slot->db.reset();
        slot->path = p;
        auto db = RunDatabase::Open(p);
        if (!db.ok()) {
          slot->error = db.error().message;
          r.ok = false;
          r.error = slot->error;
          return r;
        }
        slot->db = *db;
        slot->error.clear();
        r.path = p;
        for (const auto& [id, in_memory] : carried) {
          std::optional<RunResult> run;
          if (in_memory) run = *in_memory;
          else if (old && id > 0) {
            auto loaded = old->Load(id);
            if (loaded.ok()) run = std::move(*loaded);
          }
          if (!run) continue;
          auto new_id = slot->db->Save(*run);
          if (new_id.ok()) r.carried.emplace_back(id, *new_id);
        }
        ListRunsInto(*slot->db, r);
        return r;
      },
      [this, gen](StoreReply r) {
        if (gen != store_generation_) return;
        // Runs kept in memory stay in the history whatever the store.
        std::vector<RunOverview> memory_only;
        for (const auto& h : history_) {
          if (h.id < 0) memory_only.push_back(h);
        }
        // Carried runs have new ids: move what is known about them.
        for (const auto& [from, to] : r.carried) {
          for (auto& id : session_runs_) if (id == from) id = to;
          for (auto& cached : run_cache_) {
            if (cached->id != from) continue;
            auto copy = std::make_shared<RunResult>(*cached);
            copy->id = to;
            cached = copy;
          }
          if (simulation_.run && simulation_.run->id == from) {
            auto copy = std::make_shared<RunResult>(*simulation_.run);
            copy->id = to;
            simulation_.run = copy;
          }
          memory_only.erase(std::remove_if(memory_only.begin(), memory_only.end(),
                                           [from = from](const RunOverview& o) { return o.id == from; }),
                            memory_only.end());
        }
        // Cached runs of the old store are not runs of this one.
        run_cache_.erase(std::remove_if(run_cache_.begin(), run_cache_.end(),
                                        [&](const std::shared_ptr<const RunResult>& c) {
                                          if (c->id < 0) return false;
                                          for (const auto& [from, to] : r.carried) if (c->id == to) return false;
                                          return true;
                                        }),
                         run_cache_.end());
        comparison_.reset();
        if (r.ok) {
          store_path_ = Q(r.path);
          store_error_.clear();
          history_ = std::move(r.runs);
        } else {
          store_path_.clear();
          store_error_ = "Runs are kept in memory only (lost when ShardScope closes): " + Q(r.error);
          history_.clear();
        }
        history_.insert(history_.end(), memory_only.begin(), memory_only.end());
        emit runStoreChanged();
        emit runHistoryReset();
      });
}

void Document::relistRuns() {
  if (!store_enabled_) return;
  const quint64 gen = store_generation_;
  auto slot = store_slot_;
  onStore(
      [slot]() -> StoreReply {
        StoreReply r;
        if (!slot->db) {
          r.ok = false;
          return r;
        }
        ListRunsInto(*slot->db, r);
        return r;
      },
      [this, gen](StoreReply r) {
        if (gen != store_generation_) return;
        if (!r.ok) {
          if (!r.error.empty()) emit runStoreMessage(Q(r.error));
          return;
        }
        std::vector<RunOverview> memory_only;
        for (const auto& h : history_) {
          if (h.id < 0) memory_only.push_back(h);
        }
        history_ = std::move(r.runs);
        history_.insert(history_.end(), memory_only.begin(), memory_only.end());
        emit runHistoryReset();
      });
}

const RunOverview* Document::runOverview(int64_t run_id) const {
  for (const auto& h : history_) {
    if (h.id == run_id) return &h;
  }
  return nullptr;
}

std::shared_ptr<const RunResult> Document::loadedRun(int64_t run_id) const {
  for (const auto& r : run_cache_) {
    if (r->id == run_id) return r;
  }
  if (simulation_.run && simulation_.run->id == run_id) return simulation_.run;
  return nullptr;
}

void Document::cacheRun(std::shared_ptr<const RunResult> run) {
  const int64_t id = run->id;
  run_cache_.erase(std::remove_if(run_cache_.begin(), run_cache_.end(),
                                  [id](const std::shared_ptr<const RunResult>& r) { return r->id == id; }),
                   run_cache_.end());
  run_cache_.push_back(std::move(run));
  // A few stored runs stay in memory (they can be read again); runs kept in memory only always do.
  constexpr size_t kCachedStoredRuns = 6;
  size_t stored = 0;
  for (const auto& r : run_cache_) stored += r->id > 0;
  for (auto it = run_cache_.begin(); stored > kCachedStoredRuns && it != run_cache_.end();) {
    if ((*it)->id > 0) {
      it = run_cache_.erase(it);
      --stored;
    } else {
      ++it;
    }
  }
}

void Document::requestRun(int64_t run_id) {
  if (auto cached = loadedRun(run_id)) {
    cacheRun(cached);  // most recently used
    emit runLoaded(run_id);
    return;
  }
  if (run_id <= 0) {
    emit runStoreMessage(QString("run %1 is not in memory").arg(run_id));
    return;
  }
  const quint64 gen = store_generation_;
  auto slot = store_slot_;
  onStore(
      [slot, run_id]() -> StoreReply {
        StoreReply r;
        if (!slot->db) {
          r.ok = false;
          r.error = "no run store is open";
          return r;
        }
        auto run = slot->db->Load(run_id);
        if (!run.ok()) {
          r.ok = false;
          r.error = run.error().message;
          return r;
        }
        r.run = std::make_shared<RunResult>(std::move(*run));
        return r;
      },
      [this, gen, run_id](StoreReply r) {
        if (gen != store_generation_) return;
        if (!r.ok) {
          emit runStoreMessage(QString("Cannot load run %1: %2").arg(run_id).arg(Q(r.error)));
          return;
        }
        cacheRun(r.run);
        emit runLoaded(run_id);
      });
}

bool Document::setRunLabel(int64_t run_id, const QString& label) {
  RunOverview* entry = nullptr;
  for (auto& h : history_) {
    if (h.id == run_id) entry = &h;
  }
  if (!entry) return false;
  const std::string text = label.toStdString();
  if (entry->label == text) return true;
  entry->label = text;
  for (auto& cached : run_cache_) {
    if (cached->id != run_id) continue;
    auto copy = std::make_shared<RunResult>(*cached);
    copy->label = text;
    cached = copy;
  }
  if (simulation_.run && simulation_.run->id == run_id) {
    auto copy = std::make_shared<RunResult>(*simulation_.run);
    copy->label = text;
    simulation_.run = copy;
  }
  emit runLabelChanged(run_id);
  if (run_id < 0) return true;
  writeToStore(QString("relabel run %1").arg(run_id),
               [run_id, text](RunDatabase& db) { return db.SetLabel(run_id, text); });
  return true;
}

void Document::writeToStore(const QString& what, std::function<Status(RunDatabase&)> write) {
  const quint64 gen = store_generation_;
  auto slot = store_slot_;
  onStore(
      [slot, write = std::move(write)]() -> StoreReply {
        StoreReply r;
        Status st = slot->db ? write(*slot->db) : Status(Error("no run store is open"));
        if (!st.ok()) {
          r.ok = false;
          r.error = st.error().message;
        }
        return r;
      },
      [this, gen, what](StoreReply r) {
        if (gen != store_generation_ || r.ok) return;
        emit runStoreMessage(QString("Cannot %1: %2").arg(what, Q(r.error)));
        relistRuns();
      });
}

bool Document::deleteRun(int64_t run_id) {
  auto it = std::find_if(history_.begin(), history_.end(), [run_id](const RunOverview& h) { return h.id == run_id; });
  if (it == history_.end()) return false;
  history_.erase(it);
  run_cache_.erase(std::remove_if(run_cache_.begin(), run_cache_.end(),
                                  [run_id](const std::shared_ptr<const RunResult>& r) { return r->id == run_id; }),
                   run_cache_.end());
  session_runs_.erase(std::remove(session_runs_.begin(), session_runs_.end(), run_id), session_runs_.end());
  if (comparison_ && (comparison_->a.id == run_id || comparison_->b.id == run_id)) comparison_.reset();
  emit runRemoved(run_id);
  if (run_id < 0) return true;
  writeToStore(QString("delete run %1").arg(run_id), [run_id](RunDatabase& db) { return db.Delete(run_id); });
  return true;
}

void Document::requestComparison(int64_t run_a, int64_t run_b) {
  const RunOverview* a = runOverview(run_a);
  const RunOverview* b = runOverview(run_b);
  if (!a || !b) {
    emit runStoreMessage(QString("Cannot compare runs %1 and %2: not in the history").arg(run_a).arg(run_b));
    return;
  }
  if (run_a < 0 || run_b < 0) {  // not both stored: the same figures from the summaries
    comparison_ = CompareRunOverviews(*a, *b);
    emit comparisonReady(run_a, run_b);
    return;
  }
  const quint64 gen = store_generation_;
  auto slot = store_slot_;
  const RunOverview fa = *a, fb = *b;
  onStore(
      [slot, run_a, run_b]() -> StoreReply {
        StoreReply r;
        if (!slot->db) {
          r.ok = false;
          r.error = "no run store is open";
          return r;
        }
        auto c = slot->db->Compare(run_a, run_b);
        if (!c.ok()) {
          r.ok = false;
          r.error = c.error().message;
          return r;
        }
        r.comparison = std::move(*c);
        return r;
      },
      [this, gen, run_a, run_b, fa, fb](StoreReply r) {
        if (gen != store_generation_) return;
        if (!r.ok) {
          emit runStoreMessage(QString("Cannot compare runs %1 and %2 in the store: %3").arg(run_a).arg(run_b).arg(Q(r.error)));
          comparison_ = CompareRunOverviews(fa, fb);
        } else {
          comparison_ = std::move(r.comparison);
        }
        emit comparisonReady(run_a, run_b);
      });
}

int64_t Document::instructionForEvent(int64_t run_id, const QString& spmd_instruction) const {
  if (!module_) return -1;
  if (const RunOverview* o = runOverview(run_id); o && !o->inputs.module_name.empty() && RunModuleName(o->inputs) != module_->name()) {
    return -1;  // another module's run: its names mean nothing here
  }
  std::string name = spmd_instruction.toStdString();
  while (!name.empty() && name.back() == ']') {  // "[i]" per enclosing loop
    const auto open = name.rfind('[');
    if (open == std::string::npos) break;
    name.erase(open);
  }
  if (name.empty()) return -1;
  // The name as the event gives it, with the partitioner's ".spmd" computation suffix dropped, and
  // without its computation.
  std::vector<std::string> candidates{name};
  for (auto pos = name.find(".spmd/"); pos != std::string::npos; pos = std::string::npos) {
    candidates.push_back(name.substr(0, pos) + name.substr(pos + 5));
  }
  if (const auto slash = name.rfind('/'); slash != std::string::npos) candidates.push_back(name.substr(slash + 1));
  auto find = [this](const std::string& n) -> int64_t {
    const Instruction* inst = module_->FindInstruction(n);
    return inst ? inst->id() : -1;
  };
  // 1. The partitioner's own map, kept with the run (in the store too).
  if (auto run = loadedRun(run_id)) {
    for (const auto& c : candidates) {
      auto it = run->origins.find(c);
      if (it == run->origins.end()) continue;
      if (int64_t id = find(it->second); id >= 0) return id;
    }
  }
  // 2. The last partitioning of this document.
  for (const auto& c : candidates) {
    for (const auto& [original, spmd_names] : partition_.became) {
      if (std::find(spmd_names.begin(), spmd_names.end(), c) == spmd_names.end()) continue;
      if (int64_t id = find(original); id >= 0) return id;
    }
    for (const auto& col : partition_.collectives) {
      if (col.instruction != c) continue;
      if (int64_t id = find(col.origin); id >= 0) return id;
    }
  }
  // 3. The same name (the partitioner keeps the names of the instructions it partitions).
  for (const auto& c : candidates) {
    if (int64_t id = find(c); id >= 0) return id;
  }
  return -1;
}

// ---- Selection -------------------------------------------------------------------------------------

void Document::select(int64_t id) {
  if (id != -1 && !instruction(id)) id = -1;
  if (id == selected_) return;
  selected_ = id;
  emit selectionChanged(id);
}

}  // namespace shardscope::views
