package rendezvous

import (
	"os"
	"strconv"
	"strings"
)

// Variables the Kubernetes controllers set in a pod, read by FromEnv. They describe pods
// (nodes), not processes: a pod runs one process unless LOCAL_WORLD_SIZE or
// PET_NPROC_PER_NODE says more.
const (
	// LeaderWorkerSet: the leader pod's DNS name (<set>-<group>.<service>.<namespace>),
	// the pods in the group, the leader included, and this pod's index in it (0 is the
	// leader).
	EnvLWSLeaderAddress = "LWS_LEADER_ADDRESS"
	EnvLWSGroupSize     = "LWS_GROUP_SIZE"
	EnvLWSWorkerIndex   = "LWS_WORKER_INDEX"
	// Kubeflow's PyTorchJob and Trainer, for torchrun (which reads PET_<option>): pods,
	// this pod's index, processes per pod ("auto", "gpu" or "cpu" count as 1 here) and
	// the master's host and port. PyTorchJob also sets MASTER_ADDR, MASTER_PORT,
	// WORLD_SIZE (pods times processes per pod) and RANK (this pod's index).
	EnvPETNNodes       = "PET_NNODES"
	EnvPETNodeRank     = "PET_NODE_RANK"
	EnvPETNProcPerNode = "PET_NPROC_PER_NODE"
	EnvPETMasterAddr   = "PET_MASTER_ADDR"
	EnvPETMasterPort   = "PET_MASTER_PORT"
	// Kubernetes sets JOB_COMPLETION_INDEX in the pods of an Indexed Job, JobSet's
	// included: the pod's index in its Job. JOBSET_NAME is the pod's label
	// jobset.sigs.k8s.io/jobset-name, set through the Downward API by the manifest
	// (JobSet sets no variables); with it, the completion index is the pod's index.
	EnvJobCompletionIndex = "JOB_COMPLETION_INDEX"
	EnvJobSetName         = "JOBSET_NAME"
	// LOCAL_WORLD_SIZE is the number of processes in this pod (torchrun's name), for a
	// pod that starts several processes itself, each with its LOCAL_RANK.
	EnvLocalWorldSize = "LOCAL_WORLD_SIZE"
	// torchrun sets TORCHELASTIC_RUN_ID in its workers: their RANK and WORLD_SIZE count
	// processes, and the pod's variables, which its workers inherit, are torchrun's input.
	EnvTorchElasticRunID = "TORCHELASTIC_RUN_ID"
)

// podVars lists, per setting of a pod, the variables FromEnv reads, first found wins.
var podVars = struct{ nodes, node, master, port []string }{
	nodes:  []string{EnvPETNNodes, EnvLWSGroupSize},
	node:   []string{EnvPETNodeRank, EnvLWSWorkerIndex, EnvJobCompletionIndex},
	master: []string{EnvMasterAddr, EnvPETMasterAddr, EnvLWSLeaderAddress},
	port:   []string{EnvMasterPort, EnvPETMasterPort},
}

// inPod reports whether a Kubernetes controller, not a process launcher, describes this
// process: a pod's variables are set and torchrun did not start it.
func inPod() bool {
	if os.Getenv(EnvTorchElasticRunID) != "" {
		return false
	}
	for _, name := range []string{EnvPETNNodes, EnvPETNodeRank, EnvLWSGroupSize, EnvLWSWorkerIndex} {
		if os.Getenv(name) != "" {
			return true
		}
	}
	return os.Getenv(EnvJobSetName) != "" && os.Getenv(EnvJobCompletionIndex) != ""
}

// fromPod fills c from the pod's variables: with N pods of P processes, the process
// with LOCAL_RANK l in pod n is rank n*P+l of N*P. It returns the errors found, each a
// [*ConfigError] naming its variable.
func fromPod(c *Config) []error {
	var errs []error
	first := func(names []string) (string, string) {
		for _, n := range names {
			if v := strings.TrimSpace(os.Getenv(n)); v != "" {
				return n, v
			}
		}
		return "", ""
	}
	// count reads the first set variable of names as an integer of at least min; unset,
	// it is an error when required and 0 otherwise.
	count := func(names []string, min int, required bool) (int, string, bool) {
		name, v := first(names)
		if name == "" {
			if required {
				errs = append(errs, &ConfigError{Var: strings.Join(names, " or ")})
				return 0, "", false
			}
			return 0, "", true
		}
		n, err := strconv.Atoi(v)
		switch {
		case err != nil && name == EnvPETNNodes && strings.Contains(v, ":"):
			errs = append(errs, &ConfigError{Var: name, Value: v, Reason: "a range of nodes is an elastic job: start the processes with torchrun"})
		case err != nil:
			errs = append(errs, &ConfigError{Var: name, Value: v, Reason: "not an integer"})
		case n < min:
			errs = append(errs, &ConfigError{Var: name, Value: v, Reason: "must be at least " + strconv.Itoa(min)})
		default:
			return n, name, true
		}
		return 0, name, false
	}
	nodes, nodesVar, okNodes := count(podVars.nodes, 1, true)
	node, nodeVar, okNode := count(podVars.node, 0, true)
	if okNodes && okNode && node >= nodes {
		errs = append(errs, &ConfigError{Var: nodeVar, Value: strconv.Itoa(node), Reason: "must be less than " + nodesVar + " (" + strconv.Itoa(nodes) + ")"})
		okNode = false
	}
	// Processes per pod: LOCAL_WORLD_SIZE (the pod's own launcher), else an integer
	// PET_NPROC_PER_NODE, else 1.
	procs, procsVar, okProcs := count([]string{EnvLocalWorldSize}, 1, false)
	if okProcs && procsVar == "" {
		procs = 1
		if v := strings.TrimSpace(os.Getenv(EnvPETNProcPerNode)); v != "" {
			if n, err := strconv.Atoi(v); err == nil {
				procs, procsVar = n, EnvPETNProcPerNode
				if n < 1 {
					errs = append(errs, &ConfigError{Var: EnvPETNProcPerNode, Value: v, Reason: "must be at least 1"})
					okProcs = false
				}
			} else if v != "auto" && v != "gpu" && v != "cpu" {
				errs = append(errs, &ConfigError{Var: EnvPETNProcPerNode, Value: v, Reason: "not an integer, auto, gpu or cpu"})
				okProcs = false
			}
		}
	}
	local, _, okLocal := count([]string{EnvLocalRank}, 0, false)
	if okProcs && okLocal {
		switch {
		case procs > 1 && os.Getenv(EnvLocalRank) == "":
			errs = append(errs, &ConfigError{Var: procsVar, Value: strconv.Itoa(procs),
				Reason: "several processes per pod need each its LOCAL_RANK: start them with torchrun, or set LOCAL_RANK for each"})
			okLocal = false
		case local >= procs:
			errs = append(errs, &ConfigError{Var: EnvLocalRank, Value: strconv.Itoa(local), Reason: "must be less than the processes per pod (" + strconv.Itoa(procs) + ")"})
			okLocal = false
		}
	}
	if okNodes && okNode && okProcs && okLocal {
		c.Rank, c.WorldSize, c.LocalRank = node*procs+local, nodes*procs, local
		// PyTorchJob's WORLD_SIZE counts processes: it must agree.
		if v := strings.TrimSpace(os.Getenv(EnvWorldSize)); v != "" && v != strconv.Itoa(c.WorldSize) {
			errs = append(errs, &ConfigError{Var: EnvWorldSize, Value: v, Reason: "disagrees with " + nodesVar + " (" + strconv.Itoa(nodes) +
				") times the processes per pod (" + strconv.Itoa(procs) + ")"})
		}
	}
	if name, v := first(podVars.master); name != "" {
		c.MasterAddr = v
	}
	c.MasterPort = DefaultMasterPort
	if name, v := first(podVars.port); name != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, &ConfigError{Var: name, Value: v, Reason: "not an integer"})
		} else {
			c.MasterPort = n
		}
	}
	return errs
}
