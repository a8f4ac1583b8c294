#include "views/item_models.h"

#include <QDateTime>
#include <QFont>
#include <QGuiApplication>

#include "core/ir.h"
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

int CollectiveTableModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(rows_.size()); }
int CollectiveTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumnCount; }

QVariant CollectiveTableModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const CollectiveInfo& c = rows_[static_cast<size_t>(index.row())];
  if (role == Qt::DisplayRole || role == Qt::ToolTipRole) {
    switch (index.column()) {
      case kKind: return Q(c.kind);
      case kInstruction: return Q(c.instruction);
      case kOrigin: return Q(c.origin);
      case kBytes: return FormatBytes(c.bytes_per_device);
      case kGroups: return Q(c.replica_groups);
      case kReason: return Q(c.reason);
      default: return {};
    }
  }
  if (role == Qt::UserRole && index.column() == kBytes) return QVariant::fromValue<qint64>(c.bytes_per_device);
  return {};
}

QVariant CollectiveTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* kNames[] = {"Collective", "SPMD instruction", "Caused by", "Bytes/device", "Replica groups", "Reason"};
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

int RunHistoryModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(rows_.size()); }
int RunHistoryModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumnCount; }

QVariant RunHistoryModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const RunOverview& r = rows_[static_cast<size_t>(index.row())];
  if (role == kRunIdRole) return QVariant::fromValue<qint64>(r.id);
  if (role == Qt::DisplayRole || role == Qt::EditRole) {
    switch (index.column()) {
      case kId: return QVariant::fromValue<qint64>(r.id);
      case kLabel: return Q(r.label);
      case kCreated: return QDateTime::fromMSecsSinceEpoch(r.created_unix_ms).toString("yyyy-MM-dd hh:mm:ss");
      case kMesh: return Q(r.inputs.mesh_text);
      case kChip: return Q(r.inputs.chip_preset);
      case kStepTime: return FormatSeconds(r.summary.step_time_s);
      case kPeakMemory: return FormatBytes(r.summary.peak_memory_bytes);
      case kMfu: return QString("%1%").arg(r.summary.mfu * 100, 0, 'f', 1);
      default: return {};
    }
  }
  if (role == Qt::TextAlignmentRole && index.column() >= kStepTime) return QVariant(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

QVariant RunHistoryModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* kNames[] = {"Run", "Label", "Created", "Mesh", "Chip", "Step time", "Peak memory", "MFU"};
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
