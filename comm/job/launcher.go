package job

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// Variables torchrun's agent sets for its workers.
const (
	// EnvUseAgentStore is "True" when torchrun's agent serves the job's store on
	// MASTER_ADDR:MASTER_PORT (a PyTorch TCPStore) and its workers are to use it.
	EnvUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE"
	// EnvRestartCount counts the agent's restarts of the workers; each restart's
	// workers use keys under their own prefix.
	EnvRestartCount = "TORCHELASTIC_RESTART_COUNT"
)

// agentStorePrefix returns the key prefix of torchrun's agent store when this process
// is to use it, or "". That is the case when TORCHELASTIC_USE_AGENT_STORE is "True",
// the job comes from the environment (no WithJob) and NCCLGO_STORE_PORT does not ask
// for ncclgo's own store. The prefix is "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>",
// as for torch's own workers, so that a restart meets under new keys.
func agentStorePrefix(cfg options) (string, error) {
	if cfg.job != nil || os.Getenv(EnvUseAgentStore) != "True" || strings.TrimSpace(os.Getenv(EnvStorePort)) != "" {
		return "", nil
	}
	v := strings.TrimSpace(os.Getenv(EnvRestartCount))
	n := 0
	if v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 0 {
			return "", &rendezvous.ConfigError{Var: EnvRestartCount, Value: v, Reason: "not a count (an integer of at least 0)"}
		}
	}
	return rendezvous.AgentStorePrefix(n), nil
}

// dialAgentStore connects to torchrun's agent store as a TCPStore client.
func dialAgentStore(ctx context.Context, jc rendezvous.Config, prefix string, log *slog.Logger) (rendezvous.Store, error) {
	c, err := rendezvous.DialTCPStore(ctx, jc.Addr(), rendezvous.WithKeyPrefix(prefix), rendezvous.WithLogger(log))
	if err != nil {
		return nil, err
	}
	return c, nil
}
