// Command consumer measures Liftbridge subscribe throughput with go-liftbridge/v2,
// reproducing the semantics of the upstream bench/consumer: subscribe to one
// partition from --start and count messages until --expected have arrived (or
// --duration passes). Throughput is counted from the Subscribe call to the last
// message.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lift "github.com/liftbridge-io/go-liftbridge/v2"

	"liftbridge_sync/bench/go/internal/stats"
)

func main() {
	servers := flag.String("servers", envOr("LIFTBRIDGE_SERVERS", "localhost:9292"), "comma-separated broker addresses")
	stream := flag.String("stream", "bench-stream", "stream name")
	partition := flag.Int("partition", 0, "partition")
	expected := flag.Int64("expected", 0, "stop after this many messages (0 = until --duration)")
	duration := flag.Duration("duration", 30*time.Second, "maximum run time")
	start := flag.String("start", "earliest", "earliest, latest or offset:N")
	output := flag.String("output", "text", "text or json")
	flag.Parse()
	if err := run(*servers, *stream, int32(*partition), *expected, *duration, *start, *output); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func startOption(start string) (lift.SubscriptionOption, error) {
	switch {
	case start == "earliest":
		return lift.StartAtEarliestReceived(), nil
	case start == "latest":
		return lift.StartAtLatestReceived(), nil
	case strings.HasPrefix(start, "offset:"):
		off, err := strconv.ParseInt(strings.TrimPrefix(start, "offset:"), 10, 64)
		if err != nil {
			return nil, err
		}
		return lift.StartAtOffset(off), nil
	}
	return nil, fmt.Errorf("unknown start %q", start)
}

func run(servers, stream string, partition int32, expected int64, duration time.Duration,
	start, output string) error {
	startOpt, err := startOption(start)
	if err != nil {
		return err
	}
	client, err := lift.Connect(strings.Split(servers, ","))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var (
		count, bytes atomic.Int64
		finished     = make(chan struct{})
		last         time.Time
		subErr       error
		once         sync.Once
	)
	usage0 := stats.Now()
	begin := time.Now()
	err = client.Subscribe(ctx, stream, func(msg *lift.Message, err error) {
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				subErr = err
			}
			once.Do(func() { close(finished) })
			return
		}
		bytes.Add(int64(len(msg.Value())))
		if n := count.Add(1); expected > 0 && n == expected {
			last = time.Now()
			cancel()
		}
	}, startOpt, lift.Partition(partition))
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	// The handler is not called again once the context is cancelled, so wait
	// for either the end of the stream (an error) or the context.
	select {
	case <-finished:
	case <-ctx.Done():
	}
	if last.IsZero() {
		last = time.Now()
	}
	elapsed := last.Sub(begin)
	usage1 := stats.Now()
	n := count.Load()
	result := map[string]any{
		"client":              "go",
		"duration":            elapsed.Seconds(),
		"total_messages":      n,
		"total_bytes":         bytes.Load(),
		"messages_per_second": float64(n) / elapsed.Seconds(),
		"errors":              0,
	}
	stats.AddUsage(result, usage0, usage1)
	if subErr != nil {
		result["errors"] = 1
		result["error"] = subErr.Error()
	}
	stats.Emit(output, result)
	if expected > 0 && n < expected {
		return fmt.Errorf("received %d of %d messages", n, expected)
	}
	return nil
}
