package config

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/atelier-ml/atelier/workflows"
)

// Config is everything the atelier binary needs. Each field can be set by a
// flag or by the ATELIER_* environment variable named in its flag help; flags
// win. Zero values are filled with the defaults below.
type Config struct {
	DatabaseURL      string
	TemporalHostPort string
	Namespace        string
	TemporalUIURL    string
	ListenAddr       string
	DataDir          string
	LogLevel         string
	// LogFormat is "console" (human) or "json".
	LogFormat string
	// ShutdownTimeout bounds graceful stops of the gateway and worker.
	ShutdownTimeout time.Duration
	// WorkerConcurrency caps concurrently running activities per worker.
	WorkerConcurrency int
	// TaskQueue is the local runtime's task queue: workers poll it, the
	// gateway starts declarative runs on it.
	TaskQueue string
}

// Default returns the built-in defaults, which match `atelier dev`.
func Default() Config {
	return Config{
		TemporalHostPort:  "127.0.0.1:7233",
		Namespace:         "atelier",
		TemporalUIURL:     "http://127.0.0.1:8233",
		ListenAddr:        "127.0.0.1:8080",
		DataDir:           ".atelier/data",
		LogLevel:          "info",
		LogFormat:         "console",
		ShutdownTimeout:   20 * time.Second,
		WorkerConcurrency: 200,
		TaskQueue:         workflows.TaskQueueLocal,
	}
}

// Bind registers flags on fs whose defaults come from the environment, then
// the built-in defaults.
func (c *Config) Bind(fs *pflag.FlagSet) {
	d := Default()
	fs.StringVar(&c.DatabaseURL, "database-url", env("ATELIER_DATABASE_URL", d.DatabaseURL), "Postgres URL (ATELIER_DATABASE_URL)")
	fs.StringVar(&c.TemporalHostPort, "temporal", env("ATELIER_TEMPORAL", d.TemporalHostPort), "Temporal frontend host:port (ATELIER_TEMPORAL)")
	fs.StringVar(&c.Namespace, "namespace", env("ATELIER_NAMESPACE", d.Namespace), "Temporal namespace (ATELIER_NAMESPACE)")
	fs.StringVar(&c.TemporalUIURL, "temporal-ui", env("ATELIER_TEMPORAL_UI", d.TemporalUIURL), "Temporal Web UI base URL for deep links (ATELIER_TEMPORAL_UI)")
	fs.StringVar(&c.ListenAddr, "listen", env("ATELIER_LISTEN", d.ListenAddr), "gateway listen address (ATELIER_LISTEN)")
	fs.StringVar(&c.DataDir, "data-dir", env("ATELIER_DATA_DIR", d.DataDir), "local runtime working directory and log files (ATELIER_DATA_DIR)")
	fs.StringVar(&c.LogLevel, "log-level", env("ATELIER_LOG_LEVEL", d.LogLevel), "debug|info|warn|error (ATELIER_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", env("ATELIER_LOG_FORMAT", d.LogFormat), "console|json (ATELIER_LOG_FORMAT)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", envDuration("ATELIER_SHUTDOWN_TIMEOUT", d.ShutdownTimeout), "graceful stop bound (ATELIER_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&c.TaskQueue, "task-queue", env("ATELIER_TASK_QUEUE", d.TaskQueue), "local runtime task queue (ATELIER_TASK_QUEUE)")
	fs.IntVar(&c.WorkerConcurrency, "worker-concurrency", envInt("ATELIER_WORKER_CONCURRENCY", d.WorkerConcurrency), "max concurrent activities per worker (ATELIER_WORKER_CONCURRENCY)")
}

// Validate reports the first missing or malformed setting.
func (c *Config) Validate() error {
	if c.DatabaseURL == "" {
		return fmt.Errorf("no database: set --database-url or ATELIER_DATABASE_URL (or use `atelier dev`, which finds or starts one)")
	}
	if c.TemporalHostPort == "" || c.Namespace == "" || c.TaskQueue == "" {
		return fmt.Errorf("temporal address, namespace and task queue are required")
	}
	if c.WorkerConcurrency < 1 {
		return fmt.Errorf("worker concurrency must be at least 1")
	}
	return nil
}

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil {
		return v
	}
	return def
}

func envDuration(key string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(key)); err == nil {
		return v
	}
	return def
}
