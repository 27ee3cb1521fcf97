// Command producer measures Liftbridge publish throughput and ack latency with
// go-liftbridge/v2, reproducing the semantics of the upstream bench/producer:
// messages are generated before timing starts; --pub-batch 1 publishes with the
// synchronous Publish; --pub-batch N > 1 fires N PublishAsync calls and then
// waits for all N acks before the next N ("batch" mode). --mode sliding keeps
// up to N publishes in flight instead. Latency is per message, from just before
// the publish call to the ack callback.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lift "github.com/liftbridge-io/go-liftbridge/v2"

	"liftbridge_sync/bench/go/internal/stats"
)

type config struct {
	servers      string
	stream       string
	subject      string
	messages     int
	messageSize  int
	pubBatch     int
	threads      int
	mode         string
	ackPolicy    string
	partitions   int
	createStream bool
	output       string
}

func parseFlags() config {
	var c config
	flag.StringVar(&c.servers, "servers", envOr("LIFTBRIDGE_SERVERS", "localhost:9292"), "comma-separated broker addresses")
	flag.StringVar(&c.stream, "stream", "bench-stream", "stream name")
	flag.StringVar(&c.subject, "subject", "", "stream subject for --create-stream (default: the stream name)")
	flag.IntVar(&c.messages, "messages", 100000, "messages to publish")
	flag.IntVar(&c.messageSize, "message-size", 256, "payload bytes")
	flag.IntVar(&c.pubBatch, "pub-batch", 1, "1 = synchronous Publish; N > 1 = PublishAsync windows of N")
	flag.IntVar(&c.threads, "threads", 1, "goroutines calling Publish on one client (with --pub-batch 1)")
	flag.StringVar(&c.mode, "mode", "batch", "batch (fire N, wait for all N) or sliding (N in flight)")
	flag.StringVar(&c.ackPolicy, "ack-policy", "leader", "none, leader or all")
	flag.IntVar(&c.partitions, "partitions", 1, "partitions for --create-stream")
	flag.BoolVar(&c.createStream, "create-stream", false, "create the stream first")
	flag.StringVar(&c.output, "output", "text", "text or json")
	flag.Parse()
	if c.subject == "" {
		c.subject = c.stream
	}
	return c
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func ackOption(policy string) (lift.MessageOption, error) {
	switch policy {
	case "none":
		return lift.AckPolicyNone(), nil
	case "leader":
		return lift.AckPolicyLeader(), nil
	case "all":
		return lift.AckPolicyAll(), nil
	}
	return nil, fmt.Errorf("unknown ack policy %q", policy)
}

func main() {
	c := parseFlags()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	ackOpt, err := ackOption(c.ackPolicy)
	if err != nil {
		return err
	}
	if c.pubBatch < 1 || c.messages < 1 {
		return errors.New("--pub-batch and --messages must be >= 1")
	}
	client, err := lift.Connect(strings.Split(c.servers, ","))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer client.Close()
	ctx := context.Background()
	if c.createStream {
		err := client.CreateStream(ctx, c.subject, c.stream, lift.Partitions(int32(c.partitions)))
		if err != nil && !errors.Is(err, lift.ErrStreamExists) {
			return fmt.Errorf("create stream: %w", err)
		}
	}

	// Pre-generate every payload as slices of one flat random buffer.
	flat := make([]byte, c.messages*c.messageSize)
	if _, err := rand.Read(flat); err != nil {
		return err
	}
	payloads := make([][]byte, c.messages)
	for i := range payloads {
		payloads[i] = flat[i*c.messageSize : (i+1)*c.messageSize]
	}
	latencies := make([]time.Duration, c.messages)
	var errCount atomic.Int64

	usage0 := stats.Now()
	start := time.Now()
	switch {
	case c.pubBatch == 1 && c.threads > 1:
		// Goroutine k publishes every threads-th payload from k, as the Python bench does.
		var wg sync.WaitGroup
		for k := 0; k < c.threads; k++ {
			wg.Add(1)
			go func(first int) {
				defer wg.Done()
				for i := first; i < len(payloads); i += c.threads {
					t0 := time.Now()
					if _, err := client.Publish(ctx, c.stream, payloads[i], ackOpt); err != nil {
						errCount.Add(1)
					}
					latencies[i] = time.Since(t0)
				}
			}(k)
		}
		wg.Wait()
	case c.pubBatch == 1:
		for i, p := range payloads {
			t0 := time.Now()
			if _, err := client.Publish(ctx, c.stream, p, ackOpt); err != nil {
				errCount.Add(1)
			}
			latencies[i] = time.Since(t0)
		}
	case c.mode == "sliding":
		slots := make(chan struct{}, c.pubBatch)
		var wg sync.WaitGroup
		wg.Add(len(payloads))
		for i, p := range payloads {
			slots <- struct{}{}
			publishOne(ctx, client, c.stream, i, p, ackOpt, latencies, &errCount, func() {
				<-slots
				wg.Done()
			})
		}
		wg.Wait()
	default:
		for base := 0; base < len(payloads); base += c.pubBatch {
			end := min(base+c.pubBatch, len(payloads))
			var wg sync.WaitGroup
			wg.Add(end - base)
			for i := base; i < end; i++ {
				publishOne(ctx, client, c.stream, i, payloads[i], ackOpt, latencies, &errCount, wg.Done)
			}
			wg.Wait()
		}
	}
	elapsed := time.Since(start)
	usage1 := stats.Now()

	sorted := stats.Sort(latencies)
	result := map[string]any{
		"client":              "go",
		"duration":            elapsed.Seconds(),
		"total_messages":      c.messages,
		"total_bytes":         c.messages * c.messageSize,
		"messages_per_second": float64(c.messages) / elapsed.Seconds(),
		"latency_p50_us":      stats.Micros(stats.Percentile(sorted, 50)),
		"latency_p99_us":      stats.Micros(stats.Percentile(sorted, 99)),
		"latency_max_us":      stats.Micros(sorted[len(sorted)-1]),
		"errors":              errCount.Load(),
	}
	stats.AddUsage(result, usage0, usage1)
	stats.Emit(c.output, result)
	return nil
}

// publishOne sends payload i with PublishAsync and records its ack latency;
// done runs once the ack (or an error) has been handled.
func publishOne(ctx context.Context, client lift.Client, stream string, i int, payload []byte,
	ackOpt lift.MessageOption, latencies []time.Duration, errCount *atomic.Int64, done func()) {
	t0 := time.Now()
	err := client.PublishAsync(ctx, stream, payload, func(_ *lift.Ack, err error) {
		latencies[i] = time.Since(t0)
		if err != nil {
			errCount.Add(1)
		}
		done()
	}, ackOpt)
	if err != nil {
		latencies[i] = time.Since(t0)
		errCount.Add(1)
		done()
	}
}
