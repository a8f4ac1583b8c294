// The document's analysis as background jobs: sharding propagation after every edit (incremental,
// on the engine's lane), partitioning with its numerical check and the estimate of every collective,
// and one simulated step (stored in the run store), all through the analysis pipeline
// (app/pipeline) and the job tracker. Results go to the views' DocumentModel (propagated shardings)
// and AnalysisModel (partitioned program, simulation).
//
// A simulation of the document's shardings reuses the partitioned program of the same edit when
// there is one (made for the Partitioned program panel or by an earlier simulation): it is not
// partitioned again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include <QObject>
#include <QString>

#include "partitioner/spmd/spmd_partitioner.h"
#include "views/analysis_model.h"
#include "views/job_tracker.h"

namespace shardscope::views {
class DocumentModel;
class RunHistory;
}  // namespace shardscope::views

namespace shardscope::gui {

class RunStoreJobs;

class AnalysisJobs : public QObject {
  Q_OBJECT

 public:
  AnalysisJobs(views::DocumentModel* doc, views::AnalysisModel* analysis, views::RunHistory* runs,
               RunStoreJobs* store, views::JobTracker* jobs, QObject* parent = nullptr);
  ~AnalysisJobs() override;

  // True while a propagation is scheduled, queued or running.
  bool propagationBusy() const;
  // How many times the SPMD partitioner ran for this document (tests: a simulation of an edit that
  // is partitioned already adds none).
  int partitionings() const { return partitionings_; }

  void requestPartition();
  void cancelPartition();
  void requestSimulation(const QString& chip, views::AnalysisModel::SimulationInput input);
  void cancelSimulation();

 signals:
  void propagationBusyChanged(bool busy);

 private:
  struct Worker;
  void onModuleReset();
  void schedulePropagation();
  void startPropagation();
  // A partitioning or simulation asked for while propagation ran, started once it is done.
  void startPendingSimulation();
  // The partitioned program of the document's current shardings, if one was made.
  std::shared_ptr<const PartitionResult> currentPartition() const;

  views::DocumentModel* doc_;
  views::AnalysisModel* analysis_;
  views::RunHistory* runs_;
  RunStoreJobs* store_;
  views::JobTracker* jobs_;
  std::shared_ptr<Worker> worker_;  // the propagation session: touched only on the engine's lane
  quint64 session_generation_ = 0;  // a new module or mesh: propagation starts from scratch
  bool propagation_scheduled_ = false;
  views::JobTracker::JobId propagation_job_ = 0;
  // The last partitioned program and the edit (and propagation result) it was made from.
  std::shared_ptr<const PartitionResult> last_partition_;
  quint64 last_partition_edit_ = 0, last_partition_result_ = 0, last_partition_module_ = 0;
  bool last_partition_wus_ = false;  // made with weight-update sharding
  int partitionings_ = 0;
  std::optional<QString> pending_simulation_;  // the chip of a simulation waiting for propagation
  bool pending_partition_ = false;             // a partitioning waiting for propagation
};

}  // namespace shardscope::gui
