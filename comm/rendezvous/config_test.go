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
			for _, k := range []string{EnvMasterAddr, EnvMasterPort, EnvRank, EnvWorldSize, EnvLocalRank, EnvToken} {
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
