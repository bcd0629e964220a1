package rendezvous

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
)

// Environment variables FromEnv reads; torchrun sets the first five.
const (
	EnvMasterAddr = "MASTER_ADDR"
	EnvMasterPort = "MASTER_PORT"
	EnvRank       = "RANK"
	EnvWorldSize  = "WORLD_SIZE"
	EnvLocalRank  = "LOCAL_RANK"
	EnvToken      = "NCCLGO_TOKEN"
)

// unset marks an integer setting that neither the environment nor an option gave.
const unset = math.MinInt

// Config is where the store is and who this process is, as torchrun describes it.
type Config struct {
	// MasterAddr is the host of the store (MASTER_ADDR); rank 0 listens there.
	MasterAddr string
	// MasterPort is the store's TCP port (MASTER_PORT), 1 to 65535.
	MasterPort int
	// Rank is this process's rank (RANK), in [0, WorldSize).
	Rank int
	// WorldSize is the number of processes (WORLD_SIZE), at least 1.
	WorldSize int
	// LocalRank is this process's rank on its machine (LOCAL_RANK), in [0, WorldSize);
	// it picks the GPU. FromEnv defaults it to 0 only when WorldSize is 1.
	LocalRank int
	// Token is the shared secret (NCCLGO_TOKEN); empty means no authentication.
	Token string
}

// Variables of other launchers FromEnv falls back to when torchrun's are unset.
const (
	EnvSlurmProcID      = "SLURM_PROCID"
	EnvSlurmNTasks      = "SLURM_NTASKS"
	EnvSlurmLocalID     = "SLURM_LOCALID"
	EnvSlurmJobNodeList = "SLURM_JOB_NODELIST"
	EnvSlurmLaunchNode  = "SLURM_LAUNCH_NODE_IPADDR"
	EnvOMPIRank         = "OMPI_COMM_WORLD_RANK"
	EnvOMPISize         = "OMPI_COMM_WORLD_SIZE"
	EnvOMPILocalRank    = "OMPI_COMM_WORLD_LOCAL_RANK"
	EnvOMPILocalSize    = "OMPI_COMM_WORLD_LOCAL_SIZE"
	EnvPMIxRank         = "PMIX_RANK"
)

// DefaultMasterPort is the store's port when a launcher other than torchrun (srun,
// mpirun) started the process and MASTER_PORT is unset; torchrun's default too.
const DefaultMasterPort = 29500

// launcherVars lists, per setting, the variables FromEnv reads, first found wins:
// torchrun's, then Open MPI's (also under mpirun inside a Slurm job, whose SLURM_*
// describe the batch step, not the ranks), then PMIx's, then Slurm's.
var launcherVars = []struct {
	setting string
	vars    []string
}{
	{"rank", []string{EnvRank, EnvOMPIRank, EnvPMIxRank, EnvSlurmProcID}},
	{"world size", []string{EnvWorldSize, EnvOMPISize, EnvSlurmNTasks}},
	{"local rank", []string{EnvLocalRank, EnvOMPILocalRank, EnvSlurmLocalID}},
}

// FromEnv reads who this process is and where the store is from the environment,
// applies opts over it (for code that knows better than the environment), and
// validates the result. Under torchrun it reads MASTER_ADDR, MASTER_PORT, RANK,
// WORLD_SIZE and LOCAL_RANK; where those are unset it falls back to
//
//   - Open MPI / PMIx (mpirun): OMPI_COMM_WORLD_RANK (or PMIX_RANK),
//     OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK; the store's host is
//     MASTER_ADDR, or 127.0.0.1 when all ranks run on one machine
//     (OMPI_COMM_WORLD_LOCAL_SIZE equals the size);
//   - Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the store's host is
//     MASTER_ADDR, else the first host of SLURM_JOB_NODELIST (where rank 0 runs with
//     srun's default block distribution), else SLURM_LAUNCH_NODE_IPADDR;
//
// and the port is MASTER_PORT, else DefaultMasterPort. NCCLGO_TOKEN is the token.
//
// In a Kubernetes pod that torchrun did not start (TORCHELASTIC_RUN_ID unset), the
// controllers' variables describe pods, and each pod runs LOCAL_WORLD_SIZE processes
// (else an integer PET_NPROC_PER_NODE, else 1), each with its LOCAL_RANK (0 when the pod
// runs one): the process with local rank l in pod n of N pods of P processes is rank
// n*P+l of N*P. The pods come from
//
//   - LeaderWorkerSet: LWS_GROUP_SIZE pods (the leader included), this pod's index
//     LWS_WORKER_INDEX (the leader is 0), the store on LWS_LEADER_ADDRESS;
//   - Kubeflow PyTorchJob and Trainer: PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE,
//     the store on PET_MASTER_ADDR:PET_MASTER_PORT; PyTorchJob's WORLD_SIZE, which
//     counts processes, must agree, and its RANK (the pod's index) is not read;
//   - JobSet (JOBSET_NAME set through the Downward API): this pod's index
//     JOB_COMPLETION_INDEX; the number of pods (PET_NNODES) and MASTER_ADDR come from
//     the manifest, since JobSet sets no variables;
//
// MASTER_ADDR and MASTER_PORT, when set, win over the controllers' address and port.
// Errors are [*ConfigError]s (joined when several settings are wrong) naming each
// variable and its value; when no launcher's variables are set at all, one more error
// lists every variable looked for. All match ErrInvalidConfig.
func FromEnv(opts ...ConfigOption) (Config, error) {
	c := Config{MasterPort: unset, Rank: unset, WorldSize: unset, LocalRank: unset}
	var errs []error
	c.Token = os.Getenv(EnvToken)
	if inPod() {
		errs = fromPod(&c)
		return finishConfig(c, errs, opts)
	}
	c.MasterAddr = os.Getenv(EnvMasterAddr)
	other := false // a launcher other than torchrun described the process
	dsts := []*int{&c.Rank, &c.WorldSize, &c.LocalRank}
	for i, lv := range launcherVars {
		for j, name := range lv.vars {
			s, ok := os.LookupEnv(name)
			if !ok || s == "" {
				continue
			}
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				errs = append(errs, &ConfigError{Var: name, Value: s, Reason: "not an integer"})
			} else {
				*dsts[i] = n
			}
			other = other || j > 0
			break
		}
	}
	if s, ok := os.LookupEnv(EnvMasterPort); ok && s != "" {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			errs = append(errs, &ConfigError{Var: EnvMasterPort, Value: s, Reason: "not an integer"})
		} else {
			c.MasterPort = n
		}
	} else if other {
		c.MasterPort = DefaultMasterPort
	}
	if c.MasterAddr == "" && other {
		addr, err := launcherMaster()
		if err != nil {
			errs = append(errs, err)
		}
		c.MasterAddr = addr
	}
	return finishConfig(c, errs, opts)
}

// finishConfig applies opts over what the environment gave and validates the result.
func finishConfig(c Config, errs []error, opts []ConfigOption) (Config, error) {
	for _, o := range opts {
		if o != nil {
			o.applyConfig(&c)
		}
	}
	if c.LocalRank == unset && c.WorldSize == 1 {
		c.LocalRank = 0
	}
	if c.Rank == unset && c.WorldSize == unset {
		var names []string
		for _, lv := range launcherVars {
			names = append(names, lv.vars...)
		}
		names = append(names, EnvMasterAddr, EnvMasterPort, EnvSlurmJobNodeList, EnvSlurmLaunchNode, EnvOMPILocalSize,
			EnvLWSGroupSize, EnvLWSWorkerIndex, EnvPETNNodes, EnvPETNodeRank, EnvJobSetName)
		errs = append(errs, fmt.Errorf("%w: no launcher describes this process (torchrun, srun, mpirun, LeaderWorkerSet, PyTorchJob, JobSet); looked for %s",
			ErrInvalidConfig, strings.Join(names, ", ")))
	}
	if len(errs) > 0 {
		return c, errors.Join(append(errs, c.Validate())...)
	}
	return c, c.Validate()
}

// launcherMaster is the store's host as Open MPI or Slurm describe the job.
func launcherMaster() (string, error) {
	if size, local := os.Getenv(EnvOMPISize), os.Getenv(EnvOMPILocalSize); size != "" && size == local {
		return "127.0.0.1", nil
	}
	if nl := os.Getenv(EnvSlurmJobNodeList); nl != "" {
		h, err := firstHost(nl)
		if err != nil {
			return "", &ConfigError{Var: EnvSlurmJobNodeList, Value: nl, Reason: err.Error()}
		}
		return h, nil
	}
	if ip := strings.TrimSpace(os.Getenv(EnvSlurmLaunchNode)); ip != "" {
		return ip, nil
	}
	return "", nil
}

// firstHost returns the first host of a Slurm host list in its compressed syntax:
// comma-separated entries, each a name with bracketed ranges and lists, as in
// "gpu[01-04,07],login1" (first host "gpu01") or "rack[1-2]-n[3-4]" ("rack1-n3").
// Zero padding is kept.
func firstHost(list string) (string, error) {
	list = strings.TrimSpace(list)
	var b strings.Builder
	for i := 0; i < len(list); i++ {
		ch := list[i]
		switch {
		case ch == '[':
			end := strings.IndexByte(list[i:], ']')
			if end < 0 {
				return "", fmt.Errorf("'[' at offset %d is never closed", i)
			}
			group := list[i+1 : i+end]
			if strings.IndexByte(group, '[') >= 0 {
				return "", fmt.Errorf("nested '[' at offset %d", i)
			}
			first, _, _ := strings.Cut(group, ",")
			lo, hi, isRange := strings.Cut(first, "-")
			if lo == "" || !allDigits(lo) || (isRange && (!allDigits(hi) || hi == "")) {
				return "", fmt.Errorf("range %q at offset %d is not N, N-M or a list of them", group, i)
			}
			b.WriteString(lo)
			i += end
		case ch == ']':
			return "", fmt.Errorf("']' at offset %d without '['", i)
		case ch == ',':
			if b.Len() == 0 {
				return "", fmt.Errorf("empty host before offset %d", i)
			}
			return b.String(), nil
		case ch == ' ' || ch == '\t':
			return "", fmt.Errorf("blank at offset %d", i)
		default:
			b.WriteByte(ch)
		}
	}
	if b.Len() == 0 {
		return "", errors.New("no host")
	}
	return b.String(), nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Validate checks every setting and returns a [*ConfigError] for each wrong one
// (joined), or nil.
func (c Config) Validate() error {
	var errs []error
	bad := func(name string, v int, reason string) {
		if v == unset {
			errs = append(errs, &ConfigError{Var: name})
			return
		}
		errs = append(errs, &ConfigError{Var: name, Value: strconv.Itoa(v), Reason: reason})
	}
	switch {
	case c.MasterAddr == "":
		errs = append(errs, &ConfigError{Var: EnvMasterAddr})
	case strings.ContainsAny(c.MasterAddr, " \t\r\n/"):
		errs = append(errs, &ConfigError{Var: EnvMasterAddr, Value: c.MasterAddr, Reason: "not a host name or IP address"})
	}
	if c.MasterPort < 1 || c.MasterPort > 65535 {
		bad(EnvMasterPort, c.MasterPort, "must be in 1..65535")
	}
	worldOK := c.WorldSize >= 1
	if !worldOK {
		bad(EnvWorldSize, c.WorldSize, "must be at least 1")
	}
	switch {
	case c.Rank < 0:
		bad(EnvRank, c.Rank, "must be at least 0")
	case worldOK && c.Rank >= c.WorldSize:
		bad(EnvRank, c.Rank, "must be less than WORLD_SIZE ("+strconv.Itoa(c.WorldSize)+")")
	}
	switch {
	case c.LocalRank < 0:
		bad(EnvLocalRank, c.LocalRank, "must be at least 0")
	case worldOK && c.LocalRank >= c.WorldSize:
		bad(EnvLocalRank, c.LocalRank, "must be less than WORLD_SIZE ("+strconv.Itoa(c.WorldSize)+")")
	}
	return errors.Join(errs...)
}

// Addr is the store's address, "MASTER_ADDR:MASTER_PORT" (IPv6 hosts in brackets).
func (c Config) Addr() string {
	return net.JoinHostPort(c.MasterAddr, strconv.Itoa(c.MasterPort))
}
