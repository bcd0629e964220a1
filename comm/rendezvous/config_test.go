package rendezvous

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFromEnv(t *testing.T) {
	full := map[string]string{
		EnvMasterAddr: "10.0.0.1", EnvMasterPort: "29500", EnvRank: "3",
		EnvWorldSize: "8", EnvLocalRank: "1", EnvToken: "tok",
	}
	with := func(changes map[string]string) map[string]string {
		m := make(map[string]string, len(full))
		for k, v := range full {
			m[k] = v
		}
		for k, v := range changes {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name    string
		env     map[string]string
		opts    []ConfigOption
		want    Config
		wantErr []string // each must appear; all match ErrInvalidConfig
	}{
		{"torchrun environment", full, nil,
			Config{MasterAddr: "10.0.0.1", MasterPort: 29500, Rank: 3, WorldSize: 8, LocalRank: 1, Token: "tok"}, nil},
		{"options override the environment", full,
			[]ConfigOption{WithMaster("::1", 1234), WithRank(0, 2), WithLocalRank(0), WithToken("")},
			Config{MasterAddr: "::1", MasterPort: 1234, Rank: 0, WorldSize: 2, LocalRank: 0}, nil},
		{"options alone", map[string]string{},
			[]ConfigOption{WithMaster("h", 1), WithRank(0, 1)},
			Config{MasterAddr: "h", MasterPort: 1, Rank: 0, WorldSize: 1, LocalRank: 0}, nil},
		{"local rank defaults to 0 for one process", with(map[string]string{EnvRank: "0", EnvWorldSize: "1", EnvLocalRank: ""}), nil,
			Config{MasterAddr: "10.0.0.1", MasterPort: 29500, Rank: 0, WorldSize: 1, LocalRank: 0, Token: "tok"}, nil},
		{"nothing set", map[string]string{}, nil, Config{},
			[]string{"MASTER_ADDR is not set", "MASTER_PORT is not set", "RANK is not set", "WORLD_SIZE is not set", "LOCAL_RANK is not set"}},
		{"local rank required for several processes", with(map[string]string{EnvLocalRank: ""}), nil, Config{},
			[]string{"LOCAL_RANK is not set"}},
		{"not an integer", with(map[string]string{EnvRank: "three"}), nil, Config{},
			[]string{`RANK="three": not an integer`}},
		{"port out of range", with(map[string]string{EnvMasterPort: "70000"}), nil, Config{},
			[]string{`MASTER_PORT="70000": must be in 1..65535`}},
		{"rank not below world", with(map[string]string{EnvRank: "8"}), nil, Config{},
			[]string{`RANK="8": must be less than WORLD_SIZE (8)`}},
		{"negative local rank", with(map[string]string{EnvLocalRank: "-1"}), nil, Config{},
			[]string{`LOCAL_RANK="-1": must be at least 0`}},
		{"world zero", with(map[string]string{EnvWorldSize: "0", EnvRank: "0"}), nil, Config{},
			[]string{`WORLD_SIZE="0": must be at least 1`}},
		{"address with a path", with(map[string]string{EnvMasterAddr: "http://x"}), nil, Config{},
			[]string{`MASTER_ADDR="http://x": not a host name or IP address`}},
		{"bad option", full, []ConfigOption{WithRank(9, 4)}, Config{},
			[]string{`RANK="9": must be less than WORLD_SIZE (4)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range allLauncherVars {
				t.Setenv(k, tt.env[k])
			}
			got, err := FromEnv(tt.opts...)
			if tt.wantErr == nil {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			var ce *ConfigError
			require.True(t, errors.As(err, &ce))
			for _, w := range tt.wantErr {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestConfigAddr(t *testing.T) {
	assert.Equal(t, "10.0.0.1:29500", Config{MasterAddr: "10.0.0.1", MasterPort: 29500}.Addr())
	assert.Equal(t, "[::1]:29500", Config{MasterAddr: "::1", MasterPort: 29500}.Addr())
}

// allLauncherVars are every variable FromEnv reads.
var allLauncherVars = []string{EnvMasterAddr, EnvMasterPort, EnvRank, EnvWorldSize, EnvLocalRank, EnvToken,
	EnvSlurmProcID, EnvSlurmNTasks, EnvSlurmLocalID, EnvSlurmJobNodeList, EnvSlurmLaunchNode,
	EnvOMPIRank, EnvOMPISize, EnvOMPILocalRank, EnvOMPILocalSize, EnvPMIxRank,
	EnvLWSLeaderAddress, EnvLWSGroupSize, EnvLWSWorkerIndex, EnvPETNNodes, EnvPETNodeRank, EnvPETNProcPerNode,
	EnvPETMasterAddr, EnvPETMasterPort, EnvJobCompletionIndex, EnvJobSetName, EnvLocalWorldSize, EnvTorchElasticRunID}

func TestFromEnvLaunchers(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr []string
	}{
		{"srun", map[string]string{EnvSlurmProcID: "5", EnvSlurmNTasks: "8", EnvSlurmLocalID: "1", EnvSlurmJobNodeList: "gpu[07-10],login1", EnvSlurmLaunchNode: "10.1.1.1"},
			Config{MasterAddr: "gpu07", MasterPort: DefaultMasterPort, Rank: 5, WorldSize: 8, LocalRank: 1}, nil},
		{"srun without a node list", map[string]string{EnvSlurmProcID: "0", EnvSlurmNTasks: "2", EnvSlurmLocalID: "0", EnvSlurmLaunchNode: "10.1.1.1", EnvMasterPort: "4000"},
			Config{MasterAddr: "10.1.1.1", MasterPort: 4000, Rank: 0, WorldSize: 2, LocalRank: 0}, nil},
		{"srun with MASTER_ADDR", map[string]string{EnvSlurmProcID: "1", EnvSlurmNTasks: "2", EnvSlurmLocalID: "1", EnvSlurmJobNodeList: "n1", EnvMasterAddr: "head"},
			Config{MasterAddr: "head", MasterPort: DefaultMasterPort, Rank: 1, WorldSize: 2, LocalRank: 1}, nil},
		{"mpirun on one machine", map[string]string{EnvOMPIRank: "3", EnvOMPISize: "4", EnvOMPILocalRank: "3", EnvOMPILocalSize: "4"},
			Config{MasterAddr: "127.0.0.1", MasterPort: DefaultMasterPort, Rank: 3, WorldSize: 4, LocalRank: 3}, nil},
		{"mpirun inside a Slurm job: Open MPI's ranks win", map[string]string{EnvOMPIRank: "3", EnvOMPISize: "4", EnvOMPILocalRank: "1", EnvOMPILocalSize: "2",
			EnvSlurmProcID: "0", EnvSlurmNTasks: "1", EnvSlurmLocalID: "0", EnvSlurmJobNodeList: "a[1-2]"},
			Config{MasterAddr: "a1", MasterPort: DefaultMasterPort, Rank: 3, WorldSize: 4, LocalRank: 1}, nil},
		{"PMIx rank", map[string]string{EnvPMIxRank: "2", EnvOMPISize: "3", EnvOMPILocalRank: "2", EnvOMPILocalSize: "3"},
			Config{MasterAddr: "127.0.0.1", MasterPort: DefaultMasterPort, Rank: 2, WorldSize: 3, LocalRank: 2}, nil},
		{"torchrun's variables win", map[string]string{EnvRank: "1", EnvWorldSize: "2", EnvLocalRank: "0", EnvMasterAddr: "m", EnvMasterPort: "1",
			EnvSlurmProcID: "7", EnvSlurmNTasks: "9", EnvSlurmLocalID: "7"},
			Config{MasterAddr: "m", MasterPort: 1, Rank: 1, WorldSize: 2, LocalRank: 0}, nil},
		{"mpirun on several machines needs MASTER_ADDR", map[string]string{EnvOMPIRank: "0", EnvOMPISize: "4", EnvOMPILocalRank: "0", EnvOMPILocalSize: "2"},
			Config{}, []string{"MASTER_ADDR is not set"}},
		{"bad Slurm rank", map[string]string{EnvSlurmProcID: "x", EnvSlurmNTasks: "2", EnvSlurmLocalID: "0", EnvSlurmJobNodeList: "n1"},
			Config{}, []string{`SLURM_PROCID="x": not an integer`}},
		{"bad node list", map[string]string{EnvSlurmProcID: "0", EnvSlurmNTasks: "2", EnvSlurmLocalID: "0", EnvSlurmJobNodeList: "gpu[01-"},
			Config{}, []string{`SLURM_JOB_NODELIST="gpu[01-": '[' at offset 3 is never closed`}},
		{"nothing set: one error lists every variable", map[string]string{},
			Config{}, []string{"no launcher describes this process", "RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, SLURM_PROCID, WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS, LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MASTER_ADDR, MASTER_PORT, SLURM_JOB_NODELIST, SLURM_LAUNCH_NODE_IPADDR, OMPI_COMM_WORLD_LOCAL_SIZE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range allLauncherVars {
				t.Setenv(k, tt.env[k])
			}
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

func TestFirstHost(t *testing.T) {
	for in, want := range map[string]string{
		"gpu01":                 "gpu01",
		"gpu[01-04]":            "gpu01",
		"gpu[007,009-012],cpu1": "gpu007",
		"login1,gpu[1-2]":       "login1",
		"rack[1-2]-n[3-4]":      "rack1-n3",
		"node-[10-11].cluster":  "node-10.cluster",
		" n[5] ":                "n5",
	} {
		got, err := firstHost(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for in, msg := range map[string]string{
		"":         "no host",
		"gpu[01-":  "never closed",
		"gpu]":     "without '['",
		"gpu[a-b]": "is not N, N-M",
		"gpu[[1]]": "nested",
		",gpu1":    "empty host",
		"gpu[1-]":  "is not N, N-M",
		"a b":      "blank",
	} {
		_, err := firstHost(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), msg, in)
	}
}
