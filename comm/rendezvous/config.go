package rendezvous

import (
	"errors"
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

// FromEnv reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK and NCCLGO_TOKEN,
// applies opts over them (for code that knows better than the environment), and
// validates the result. Errors are [*ConfigError]s (joined when several settings are
// wrong) naming each variable and its value; all match ErrInvalidConfig.
func FromEnv(opts ...ConfigOption) (Config, error) {
	c := Config{MasterPort: unset, Rank: unset, WorldSize: unset, LocalRank: unset}
	var errs []error
	c.MasterAddr = os.Getenv(EnvMasterAddr)
	c.Token = os.Getenv(EnvToken)
	for _, v := range []struct {
		name string
		dst  *int
	}{{EnvMasterPort, &c.MasterPort}, {EnvRank, &c.Rank}, {EnvWorldSize, &c.WorldSize}, {EnvLocalRank, &c.LocalRank}} {
		s, ok := os.LookupEnv(v.name)
		if !ok || s == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			errs = append(errs, &ConfigError{Var: v.name, Value: s, Reason: "not an integer"})
			continue
		}
		*v.dst = n
	}
	for _, o := range opts {
		if o != nil {
			o.applyConfig(&c)
		}
	}
	if c.LocalRank == unset && c.WorldSize == 1 {
		c.LocalRank = 0
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return c, c.Validate()
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
