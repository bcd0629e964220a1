package rendezvous

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The environments below are what the controllers put in a pod, variable for variable:
//
//   - LeaderWorkerSet (sigs.k8s.io/lws, pkg/utils/pod AddLWSVariables): LWS_LEADER_ADDRESS
//     "<lws name>-<group index>.<subdomain>.<namespace>", LWS_GROUP_SIZE the size
//     annotation (pods in the group, the leader included), LWS_WORKER_INDEX the
//     worker-index label (0 for the leader);
//   - PyTorchJob (kubeflow/training-operator v1, pkg/controller.v1/pytorch envvar.go and
//     master.go): PYTHONUNBUFFERED, MASTER_PORT and PET_MASTER_PORT (the master's port,
//     23456 by default), MASTER_ADDR and PET_MASTER_ADDR ("<job>-master-0"), WORLD_SIZE
//     (replicas times nprocPerNode), RANK and PET_NODE_RANK (0 for the master, 1+i for
//     worker i), PET_NPROC_PER_NODE and PET_NNODES (the replicas);
//   - Kubeflow Trainer (TrainJob, kubeflow/trainer pkg/runtime/framework/plugins/torch):
//     PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK from the completion index, and
//     PET_MASTER_ADDR "<trainjob>-node-0-0.<trainjob>", PET_MASTER_PORT 29400; Kubernetes
//     adds JOB_COMPLETION_INDEX to the pods of the Indexed Job;
//   - JobSet sets no variables: the manifest names the pod's jobset-name label
//     (JOBSET_NAME) through the Downward API and sets the rest; Kubernetes adds
//     JOB_COMPLETION_INDEX.
func TestFromEnvKubernetes(t *testing.T) {
	lwsWorker := map[string]string{EnvLWSLeaderAddress: "ncclgo-0.ncclgo.default", EnvLWSGroupSize: "2", EnvLWSWorkerIndex: "1"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	pytorchJob := func(rank, world, nproc string) map[string]string {
		return map[string]string{"PYTHONUNBUFFERED": "0",
			EnvMasterPort: "23456", EnvPETMasterPort: "23456", EnvMasterAddr: "train-master-0", EnvPETMasterAddr: "train-master-0",
			EnvWorldSize: world, EnvRank: rank, EnvPETNProcPerNode: nproc, EnvPETNodeRank: rank, EnvPETNNodes: "2"}
	}
	trainJob := map[string]string{EnvPETNNodes: "2", EnvPETNProcPerNode: "auto", EnvPETNodeRank: "1",
		EnvPETMasterAddr: "train-node-0-0.train", EnvPETMasterPort: "29400", EnvJobCompletionIndex: "1"}
	jobSet := map[string]string{EnvJobSetName: "train", EnvJobCompletionIndex: "1", EnvPETNNodes: "2", EnvMasterAddr: "train-workers-0-0.train"}
	tests := []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr []string
	}{
		{"LeaderWorkerSet leader, one process per pod",
			with(lwsWorker, EnvLWSWorkerIndex, "0"),
			Config{MasterAddr: "ncclgo-0.ncclgo.default", MasterPort: DefaultMasterPort, Rank: 0, WorldSize: 2, LocalRank: 0}, nil},
		{"LeaderWorkerSet worker, one process per pod",
			lwsWorker,
			Config{MasterAddr: "ncclgo-0.ncclgo.default", MasterPort: DefaultMasterPort, Rank: 1, WorldSize: 2, LocalRank: 0}, nil},
		{"LeaderWorkerSet of 2 pods x 8 GPUs: the pod starts 8 processes",
			with(lwsWorker, EnvLocalWorldSize, "8", EnvLocalRank, "3", EnvMasterPort, "29600"),
			Config{MasterAddr: "ncclgo-0.ncclgo.default", MasterPort: 29600, Rank: 11, WorldSize: 16, LocalRank: 3}, nil},
		{"LeaderWorkerSet with torchrun in the pod: torchrun's variables",
			with(lwsWorker, EnvTorchElasticRunID, "none", EnvRank, "9", EnvWorldSize, "16", EnvLocalRank, "1", EnvLocalWorldSize, "8",
				EnvMasterAddr, "ncclgo-0.ncclgo.default", EnvMasterPort, "29500"),
			Config{MasterAddr: "ncclgo-0.ncclgo.default", MasterPort: 29500, Rank: 9, WorldSize: 16, LocalRank: 1}, nil},
		{"LeaderWorkerSet: 8 processes per pod need their local ranks",
			with(lwsWorker, EnvLocalWorldSize, "8"),
			Config{}, []string{`LOCAL_WORLD_SIZE="8": several processes per pod need each its LOCAL_RANK`, `LOCAL_RANK is not set`}},
		{"LeaderWorkerSet: a local rank beyond the pod's processes",
			with(lwsWorker, EnvLocalWorldSize, "8", EnvLocalRank, "8"),
			Config{}, []string{`LOCAL_RANK="8": must be less than the processes per pod (8)`}},
		{"LeaderWorkerSet: worker index beyond the group",
			with(lwsWorker, EnvLWSWorkerIndex, "2"),
			Config{}, []string{`LWS_WORKER_INDEX="2": must be less than LWS_GROUP_SIZE (2)`}},
		{"LeaderWorkerSet: group size not a number",
			with(lwsWorker, EnvLWSGroupSize, "two"),
			Config{}, []string{`LWS_GROUP_SIZE="two": not an integer`}},
		{"PyTorchJob master, nprocPerNode 1",
			pytorchJob("0", "2", "1"),
			Config{MasterAddr: "train-master-0", MasterPort: 23456, Rank: 0, WorldSize: 2, LocalRank: 0}, nil},
		{"PyTorchJob worker, nprocPerNode auto",
			pytorchJob("1", "2", "auto"),
			Config{MasterAddr: "train-master-0", MasterPort: 23456, Rank: 1, WorldSize: 2, LocalRank: 0}, nil},
		{"PyTorchJob worker, nprocPerNode 8, the pod's own 8 processes",
			with(pytorchJob("1", "16", "8"), EnvLocalRank, "5"),
			Config{MasterAddr: "train-master-0", MasterPort: 23456, Rank: 13, WorldSize: 16, LocalRank: 5}, nil},
		{"PyTorchJob worker, nprocPerNode 8, started directly: one process cannot be 8",
			pytorchJob("1", "16", "8"),
			Config{}, []string{`PET_NPROC_PER_NODE="8": several processes per pod need each its LOCAL_RANK: start them with torchrun`, "LOCAL_RANK is not set"}},
		{"PyTorchJob worker under torchrun (nprocPerNode 8): torchrun's variables",
			with(pytorchJob("1", "16", "8"), EnvTorchElasticRunID, "none", EnvRank, "9", EnvLocalRank, "1", EnvLocalWorldSize, "8"),
			Config{MasterAddr: "train-master-0", MasterPort: 23456, Rank: 9, WorldSize: 16, LocalRank: 1}, nil},
		{"PyTorchJob elastic: a range of nodes",
			with(pytorchJob("1", "2", "1"), EnvPETNNodes, "1:3"),
			Config{}, []string{`PET_NNODES="1:3": a range of nodes is an elastic job: start the processes with torchrun`}},
		{"PyTorchJob: WORLD_SIZE disagrees",
			pytorchJob("1", "4", "1"),
			Config{}, []string{`WORLD_SIZE="4": disagrees with PET_NNODES (2) times the processes per pod (1)`}},
		{"Trainer TrainJob, node 1",
			trainJob,
			Config{MasterAddr: "train-node-0-0.train", MasterPort: 29400, Rank: 1, WorldSize: 2, LocalRank: 0}, nil},
		{"JobSet, completion index 1",
			jobSet,
			Config{MasterAddr: "train-workers-0-0.train", MasterPort: DefaultMasterPort, Rank: 1, WorldSize: 2, LocalRank: 0}, nil},
		{"JobSet without the number of pods",
			with(jobSet, EnvPETNNodes, ""),
			Config{}, []string{"PET_NNODES or LWS_GROUP_SIZE is not set"}},
		{"an Indexed Job outside a JobSet is not a launcher",
			map[string]string{EnvJobCompletionIndex: "1"},
			Config{}, []string{"no launcher describes this process", "LWS_GROUP_SIZE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range allLauncherVars {
				t.Setenv(k, tt.env[k])
			}
			t.Setenv("PYTHONUNBUFFERED", tt.env["PYTHONUNBUFFERED"])
			got, err := FromEnv()
			if tt.wantErr == nil {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			for _, w := range tt.wantErr {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}
