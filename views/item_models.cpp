#include "views/item_models.h"

#include <algorithm>

#include <QDateTime>
#include <QFont>
#include <QGuiApplication>
#include <QPalette>

#include "core/base/units.h"
#include "core/collectives/participants.h"
#include "core/ir/ir.h"
#include "core/ir/replica_groups.h"
#include "views/document_model.h"
#include "views/run_history.h"
#include "views/sharding_style.h"

namespace shardscope::views {

using namespace ::shardscope::sim;

namespace {
QString Q(const std::string& s) { return QString::fromStdString(s); }
}  // namespace

// ---- InstructionTableModel ------------------------------------------------------------------------

InstructionTableModel::InstructionTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void InstructionTableModel::setDocument(DocumentModel* doc) {
  if (doc_) doc_->disconnect(this);
  doc_ = doc;
  if (doc_) {
    connect(doc_, &DocumentModel::moduleReset, this, &InstructionTableModel::reload);
    connect(doc_, &DocumentModel::shardingsUpdated, this, &InstructionTableModel::shardingsChanged);
    connect(doc_, &DocumentModel::annotationsChanged, this, &InstructionTableModel::shardingsChanged);
    connect(doc_, &DocumentModel::meshChanged, this, &InstructionTableModel::shardingsChanged);
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
        return Q(FormatBytes(static_cast<double>(b)));
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

void CollectiveTableModel::setProgram(std::shared_ptr<const PartitionResult> program,
                                      std::vector<std::optional<CollectiveCost>> estimates, const std::string& chip) {
  beginResetModel();
  program_ = std::move(program);
  chip_ = chip;
  rows_.clear();
  if (program_ && program_->module) {
    const Module& spmd = *program_->module;
    const int64_t replicas = std::max<int64_t>(1, spmd.num_replicas);
    const int64_t partitions = std::max<int64_t>(1, spmd.num_partitions);
    for (size_t k = 0; k < program_->collectives.size(); ++k) {
      Row row;
      row.collective = &program_->collectives[k];
      if (k < estimates.size()) row.cost = std::move(estimates[k]);
      const InsertedCollective& c = *row.collective;
      row.halo = c.kind == Opcode::kCollectivePermute && c.reason.rfind("halo exchange", 0) == 0;
      if (const Instruction* inst = spmd.FindInstruction(c.instruction)) {
        if (c.kind == Opcode::kCollectivePermute) {
          if (auto pairs = CollectivePermutePairs(*inst, replicas, partitions); pairs.ok()) {
            for (const auto& [from, to] : *pairs) row.participants.push_back({from, to});
          }
        } else if (auto groups = CollectiveParticipantGroups(*inst, replicas, partitions); groups.ok()) {
          row.participants = std::move(groups).value();
        }
      }
      rows_.push_back(std::move(row));
    }
  }
  endResetModel();
}

void CollectiveTableModel::clear() { setProgram(nullptr, {}, std::string()); }

const InsertedCollective* CollectiveTableModel::at(int row) const {
  return row >= 0 && row < static_cast<int>(rows_.size()) ? rows_[static_cast<size_t>(row)].collective : nullptr;
}

const CollectiveCost* CollectiveTableModel::estimate(int row) const {
  if (row < 0 || row >= static_cast<int>(rows_.size())) return nullptr;
  const auto& cost = rows_[static_cast<size_t>(row)].cost;
  return cost ? &*cost : nullptr;
}

const std::vector<std::vector<int64_t>>& CollectiveTableModel::participants(int row) const {
  static const std::vector<std::vector<int64_t>> kNone;
  return row >= 0 && row < static_cast<int>(rows_.size()) ? rows_[static_cast<size_t>(row)].participants : kNone;
}

bool CollectiveTableModel::isHalo(int row) const {
  return row >= 0 && row < static_cast<int>(rows_.size()) && rows_[static_cast<size_t>(row)].halo;
}

void CollectiveTableModel::setDevice(int64_t device) {
  if (device == device_) return;
  device_ = device;
  if (!rows_.empty()) emit dataChanged(index(0, 0), index(rowCount() - 1, kColumnCount - 1));
}

bool CollectiveTableModel::involves(int row, int64_t device) const {
  if (!at(row)) return false;
  const auto& groups = participants(row);
  if (device < 0 || groups.empty()) return true;  // no groups: every device takes part
  for (const auto& g : groups)
    if (std::find(g.begin(), g.end(), device) != g.end()) return true;
  return false;
}

QString CollectiveTableModel::groupsText(int row) const {
  const InsertedCollective* c = at(row);
  if (!c) return {};
  const auto& groups = participants(row);
  if (device_ < 0 || groups.empty()) return Q(c->replica_groups);
  if (c->kind == Opcode::kCollectivePermute) {
    QStringList sends, receives;
    for (const auto& p : groups) {
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
  for (const auto& g : groups)
    if (std::find(g.begin(), g.end(), device_) != g.end())
      // (one group: the codec's text of a one-group list without its outer braces)
      return Q(ReplicaGroupsText(std::vector<std::vector<int64_t>>{g})).mid(1).chopped(1) +
             QString(" (1 of %1 groups)").arg(groups.size());
  return QString("device %1 takes no part").arg(device_);
}

int CollectiveTableModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(rows_.size()); }
int CollectiveTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumnCount; }

QVariant CollectiveTableModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const Row& row = rows_[static_cast<size_t>(index.row())];
  const InsertedCollective& c = *row.collective;
  const QString kind = Q(std::string(OpcodeName(c.kind)));
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case kKind: return row.halo ? kind + " (halo)" : kind;
      case kInstruction: return Q(c.instruction);
      case kOrigin: return Q(c.origin);
      case kBytes: return Q(FormatBytes(static_cast<double>(c.bytes_per_device)));
      case kTime: return row.cost ? Q(FormatSeconds(row.cost->time_s)) : QString("\u2013");
      case kGroups: return groupsText(index.row());
      case kReason: return Q(c.reason);
      default: return {};
    }
  }
  if (role == Qt::ToolTipRole) {
    if (index.column() == kTime)
      return !row.cost ? QString("no estimate (the mesh does not fit a slice of %1)").arg(Q(chip_.empty() ? "the chip" : chip_))
                       : QString("%1 on %2 \u2014 %3").arg(Q(FormatSeconds(row.cost->time_s)), Q(chip_), Q(row.cost->algorithm));
    if (index.column() == kGroups) return Q(c.replica_groups);
    return data(index, Qt::DisplayRole);
  }
  if (role == Qt::ForegroundRole && !involves(index.row(), device_))
    return QGuiApplication::palette().color(QPalette::Disabled, QPalette::Text);
  if (role == Qt::FontRole && index.column() == kKind && row.halo) {
    QFont f;
    f.setItalic(true);
    return f;
  }
  if (role == kSortRole) {
    if (index.column() == kBytes) return QVariant::fromValue<qint64>(c.bytes_per_device);
    if (index.column() == kTime) return row.cost ? row.cost->time_s : -1.0;
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
      case kStepTime: return Q(FormatSeconds(r.summary.step_time_s));
      case kPeakMemory: return Q(FormatBytes(static_cast<double>(r.summary.peak_memory_bytes)));
      case kBytes: return Q(FormatBytes(static_cast<double>(r.summary.bytes_communicated)));
      case kMfu: return Q(FormatPercent(r.summary.mfu));
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
