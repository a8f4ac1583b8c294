#include "views/item_models.h"

#include <algorithm>

#include <QDateTime>
#include <QFont>
#include <QGuiApplication>
#include <QPalette>

#include "core/ir/ir.h"
#include "views/document.h"
#include "views/sharding_style.h"

namespace shardscope::views {

namespace {
QString Q(const std::string& s) { return QString::fromStdString(s); }
}  // namespace

QString FormatSeconds(double s) {
  const double a = std::abs(s);
  if (a == 0) return "0 s";
  double v = s;
  const char* unit = "s";
  if (a < 1e-6) v = s * 1e9, unit = "ns";
  else if (a < 1e-3) v = s * 1e6, unit = "\u00B5s";
  else if (a < 1) v = s * 1e3, unit = "ms";
  const double av = std::abs(v);
  return QString("%1 %2").arg(v, 0, 'f', av >= 100 ? 0 : (av >= 10 ? 1 : 2)).arg(QString::fromUtf8(unit));
}

// ---- InstructionTableModel ------------------------------------------------------------------------

InstructionTableModel::InstructionTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void InstructionTableModel::setDocument(Document* doc) {
  if (doc_) doc_->disconnect(this);
  doc_ = doc;
  if (doc_) {
    connect(doc_, &Document::moduleReset, this, &InstructionTableModel::reload);
    connect(doc_, &Document::shardingsUpdated, this, &InstructionTableModel::shardingsChanged);
    connect(doc_, &Document::annotationsChanged, this, &InstructionTableModel::shardingsChanged);
    connect(doc_, &Document::meshChanged, this, &InstructionTableModel::shardingsChanged);
  }
  reload();
}

void InstructionTableModel::reload() {
  beginResetModel();
  rows_.clear();
  if (doc_ && doc_->module()) {
    const Module* m = doc_->module();
    if (m->entry()) {
      for (const auto& inst : m->entry()->instructions()) rows_.push_back(inst.get());
    }
    for (const auto& c : m->computations()) {
      if (c.get() == m->entry()) continue;
      for (const auto& inst : c->instructions()) rows_.push_back(inst.get());
    }
  }
  endResetModel();
}

void InstructionTableModel::shardingsChanged() {
  if (rows_.empty()) return;
  emit dataChanged(index(0, kSharding), index(static_cast<int>(rows_.size()) - 1, kBytesPerDevice));
}

int InstructionTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}
int InstructionTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumnCount; }

int64_t InstructionTableModel::idAt(int row) const {
  return row >= 0 && row < static_cast<int>(rows_.size()) ? rows_[static_cast<size_t>(row)]->id() : -1;
}

int InstructionTableModel::rowOf(int64_t id) const {
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (rows_[i]->id() == id) return static_cast<int>(i);
  }
  return -1;
}

QVariant InstructionTableModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid) || !doc_) return {};
  const Instruction* inst = rows_[static_cast<size_t>(index.row())];
  if (role == kIdRole) return QVariant::fromValue<qint64>(inst->id());
  const auto sh = doc_->sharding(inst->id());
  const TensorOrigin origin = doc_->origin(inst->id());
  const int col = index.column();
  if (role == Qt::DisplayRole || role == kSortRole || role == Qt::ToolTipRole) {
    switch (col) {
      case kName: {
        if (role == Qt::ToolTipRole) return Q(inst->op_name());
        const QString n = doc_->qualifiedName(inst);
        return n;
      }
      case kOpcode: return Q(inst->opcode_text());
      case kShape: return ShapeText(inst->shape());
      case kSharding:
        if (!sh) return role == kSortRole ? QString("~") : QString();
        if (role == Qt::ToolTipRole) return HloShardingText(*sh);
        return NamedAxesText(*sh, inst->shape(), doc_->mesh(), "");
      case kOrigin:
        return origin == TensorOrigin::kUser ? QString("user") : origin == TensorOrigin::kInferred ? QString("inferred") : QString("none");
      case kLocalShape: return LocalShapeText(inst->shape(), sh);
      case kBytesPerDevice: {
        const int64_t b = BytesPerDevice(inst->shape(), sh);
        if (role == kSortRole) return QVariant::fromValue<qint64>(b);
        return FormatBytes(b);
      }
      default: return {};
    }
  }
  if (role == Qt::DecorationRole && col == kSharding && sh) {
    return ShardingFillColor(*sh, QGuiApplication::palette());
  }
  if (role == Qt::FontRole && origin == TensorOrigin::kUser && (col == kSharding || col == kOrigin)) {
    QFont f;
    f.setBold(true);
    return f;
  }
  if (role == Qt::TextAlignmentRole && col == kBytesPerDevice) return QVariant(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

QVariant InstructionTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* kNames[] = {"Name", "Opcode", "Shape", "Sharding", "Origin", "Per-device shape", "Bytes/device"};
  return section >= 0 && section < kColumnCount ? QString(kNames[section]) : QVariant();
}

// ---- CollectiveTableModel -------------------------------------------------------------------------

CollectiveTableModel::CollectiveTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void CollectiveTableModel::setCollectives(std::vector<CollectiveInfo> collectives) {
  beginResetModel();
  rows_ = std::move(collectives);
  endResetModel();
}

const CollectiveInfo* CollectiveTableModel::at(int row) const {
  return row >= 0 && row < static_cast<int>(rows_.size()) ? &rows_[static_cast<size_t>(row)] : nullptr;
}

void CollectiveTableModel::setDevice(int64_t device) {
  if (device == device_) return;
  device_ = device;
  if (!rows_.empty()) emit dataChanged(index(0, 0), index(rowCount() - 1, kColumnCount - 1));
}

bool CollectiveTableModel::involves(int row, int64_t device) const {
  const CollectiveInfo* c = at(row);
  if (!c) return false;
  if (device < 0 || c->groups.empty()) return true;  // no groups: every device takes part
  for (const auto& g : c->groups)
    if (std::find(g.begin(), g.end(), device) != g.end()) return true;
  return false;
}

QString CollectiveTableModel::groupsText(int row) const {
  const CollectiveInfo* c = at(row);
  if (!c) return {};
  if (device_ < 0 || c->groups.empty()) return Q(c->replica_groups);
  auto list = [](const std::vector<int64_t>& g) {
    QStringList parts;
    for (int64_t d : g) parts << QString::number(d);
    return "{" + parts.join(",") + "}";
  };
  if (c->kind == "collective-permute") {
    QStringList sends, receives;
    for (const auto& p : c->groups) {
      if (p.size() != 2) continue;
      if (p[0] == device_) sends << QString::number(p[1]);
      if (p[1] == device_) receives << QString::number(p[0]);
    }
    if (sends.isEmpty() && receives.isEmpty()) return QString("device %1 takes no part").arg(device_);
    QStringList out;
    if (!sends.isEmpty()) out << "sends to " + sends.join(", ");
    if (!receives.isEmpty()) out << "receives from " + receives.join(", ");
    return out.join("; ");
  }
  for (const auto& g : c->groups)
    if (std::find(g.begin(), g.end(), device_) != g.end())
      return list(g) + QString(" (1 of %1 groups)").arg(c->groups.size());
  return QString("device %1 takes no part").arg(device_);
}

int CollectiveTableModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(rows_.size()); }
int CollectiveTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumnCount; }

QVariant CollectiveTableModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const CollectiveInfo& c = rows_[static_cast<size_t>(index.row())];
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case kKind: return c.halo ? Q(c.kind) + " (halo)" : Q(c.kind);
      case kInstruction: return Q(c.instruction);
      case kOrigin: return Q(c.origin);
      case kBytes: return FormatBytes(c.bytes_per_device);
      case kTime: return c.estimated_seconds < 0 ? QString("\u2013") : FormatSeconds(c.estimated_seconds);
      case kGroups: return groupsText(index.row());
      case kReason: return Q(c.reason);
      default: return {};
    }
  }
  if (role == Qt::ToolTipRole) {
    if (index.column() == kTime)
      return c.estimated_seconds < 0 ? QString("no estimate (the mesh does not fit a slice of the default chip)")
                                     : QString("%1 \u2014 %2").arg(FormatSeconds(c.estimated_seconds), Q(c.algorithm));
    if (index.column() == kGroups) return Q(c.replica_groups);
    return data(index, Qt::DisplayRole);
  }
  if (role == Qt::ForegroundRole && !involves(index.row(), device_))
    return QGuiApplication::palette().color(QPalette::Disabled, QPalette::Text);
  if (role == Qt::FontRole && index.column() == kKind && c.halo) {
    QFont f;
    f.setItalic(true);
    return f;
  }
  if (role == kSortRole) {
    if (index.column() == kBytes) return QVariant::fromValue<qint64>(c.bytes_per_device);
    if (index.column() == kTime) return c.estimated_seconds;
    return data(index, Qt::DisplayRole);
  }
  return {};
}

QVariant CollectiveTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* kNames[] = {"Collective", "SPMD instruction", "Caused by", "Bytes/device", "Est. time",
                                 "Replica groups", "Reason"};
  return section >= 0 && section < kColumnCount ? QString(kNames[section]) : QVariant();
}

// ---- RunHistoryModel ------------------------------------------------------------------------------

RunHistoryModel::RunHistoryModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunHistoryModel::setRuns(std::vector<RunOverview> runs) {
  beginResetModel();
  rows_ = std::move(runs);
  endResetModel();
}

void RunHistoryModel::addRun(const RunOverview& run) {
  const int row = static_cast<int>(rows_.size());
  beginInsertRows({}, row, row);
  rows_.push_back(run);
  endInsertRows();
}

bool RunHistoryModel::removeRun(int64_t run_id) {
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (rows_[i].id != run_id) continue;
    beginRemoveRows({}, static_cast<int>(i), static_cast<int>(i));
    rows_.erase(rows_.begin() + static_cast<std::ptrdiff_t>(i));
    endRemoveRows();
    return true;
  }
  return false;
}

bool RunHistoryModel::setLabel(int64_t run_id, const QString& label) {
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (rows_[i].id != run_id) continue;
    rows_[i].label = label.toStdString();
    emit dataChanged(index(static_cast<int>(i), kLabel), index(static_cast<int>(i), kLabel));
    return true;
  }
  return false;
}

const RunOverview* RunHistoryModel::at(int row) const {
  return row >= 0 && row < static_cast<int>(rows_.size()) ? &rows_[static_cast<size_t>(row)] : nullptr;
}

int RunHistoryModel::rowOf(int64_t run_id) const {
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (rows_[i].id == run_id) return static_cast<int>(i);
  }
  return -1;
}

void RunHistoryModel::setCurrentModule(const QString& module_name) {
  const std::string name = module_name.toStdString();
  if (name == current_module_) return;
  current_module_ = name;
  if (!rows_.empty()) emit dataChanged(index(0, 0), index(rowCount() - 1, kColumnCount - 1), {Qt::ForegroundRole});
}

int RunHistoryModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(rows_.size()); }
int RunHistoryModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumnCount; }

QVariant RunHistoryModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const RunOverview& r = rows_[static_cast<size_t>(index.row())];
  if (role == kRunIdRole) return QVariant::fromValue<qint64>(r.id);
  if (role == Qt::DisplayRole || role == Qt::EditRole) {
    switch (index.column()) {
      case kId:
        if (r.id < 0) return role == Qt::EditRole ? QVariant::fromValue<qint64>(r.id) : QVariant(QString("unsaved"));
        return QVariant::fromValue<qint64>(r.id);
      case kLabel: return Q(r.label);
      case kModule: return Q(RunModuleName(r.inputs));
      case kCreated: return QDateTime::fromMSecsSinceEpoch(r.created_unix_ms).toString("yyyy-MM-dd hh:mm:ss");
      case kMesh: return Q(r.inputs.mesh_text);
      case kChip: return Q(r.inputs.chip_preset);
      case kStepTime: return FormatSeconds(r.summary.step_time_s);
      case kPeakMemory: return FormatBytes(r.summary.peak_memory_bytes);
      case kBytes: return FormatBytes(r.summary.bytes_communicated);
      case kMfu: return QString("%1%").arg(r.summary.mfu * 100, 0, 'f', 1);
      default: return {};
    }
  }
  if (role == kSortRole) {
    switch (index.column()) {
      case kId: return QVariant::fromValue<qint64>(r.id);
      case kCreated: return QVariant::fromValue<qint64>(r.created_unix_ms);
      case kStepTime: return r.summary.step_time_s;
      case kPeakMemory: return QVariant::fromValue<qint64>(r.summary.peak_memory_bytes);
      case kBytes: return QVariant::fromValue<qint64>(r.summary.bytes_communicated);
      case kMfu: return r.summary.mfu;
      default: return data(index, Qt::DisplayRole);
    }
  }
  if (role == Qt::ToolTipRole) {
    QString tip = QString("<b>%1</b><br>module %2 on %3, mesh %4")
                      .arg(Q(r.label).toHtmlEscaped(), Q(RunModuleName(r.inputs)).toHtmlEscaped(),
                           Q(r.inputs.chip_preset).toHtmlEscaped(), Q(r.inputs.mesh_text).toHtmlEscaped());
    if (!r.inputs.topology_options.empty()) tip += "<br>" + Q(r.inputs.topology_options).toHtmlEscaped();
    if (r.id < 0) tip += "<br><i>kept in memory only: the run store could not be used</i>";
    return tip;
  }
  if (role == Qt::ForegroundRole && !current_module_.empty() && RunModuleName(r.inputs) != current_module_) {
    return QPalette().brush(QPalette::Disabled, QPalette::Text);
  }
  if (role == Qt::TextAlignmentRole && index.column() >= kStepTime) return QVariant(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

QVariant RunHistoryModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* kNames[] = {"Run",  "Label",     "Module",      "Created",            "Mesh",
                                 "Chip", "Step time", "Peak memory", "Bytes communicated", "MFU"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kColumnCount);
  return section >= 0 && section < kColumnCount ? QString(kNames[section]) : QVariant();
}

Qt::ItemFlags RunHistoryModel::flags(const QModelIndex& index) const {
  Qt::ItemFlags f = QAbstractTableModel::flags(index);
  if (index.isValid() && index.column() == kLabel) f |= Qt::ItemIsEditable;
  return f;
}

bool RunHistoryModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid) || role != Qt::EditRole ||
      index.column() != kLabel) {
    return false;
  }
  RunOverview& r = rows_[static_cast<size_t>(index.row())];
  r.label = value.toString().toStdString();
  emit dataChanged(index, index, {Qt::DisplayRole, Qt::EditRole});
  emit labelEdited(r.id, value.toString());
  return true;
}

}  // namespace shardscope::views
