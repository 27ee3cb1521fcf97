// Package stats holds the small helpers the bench programs share: nearest-rank
// percentiles over a sorted slice, process CPU time, and JSON/text output.
package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"syscall"
	"time"
)

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of sorted.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

// Sort sorts latencies in place and returns them.
func Sort(lat []time.Duration) []time.Duration {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat
}

// CPUSeconds returns the user and system CPU time of this process so far.
func CPUSeconds() (float64, float64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime), tv(ru.Stime)
}

// Emit prints result as one JSON object (format "json") or as "key: value" lines.
func Emit(format string, result map[string]any) {
	if format == "json" {
		enc := json.NewEncoder(os.Stdout)
		if err := enc.Encode(result); err != nil {
			fmt.Fprintln(os.Stderr, "encode:", err)
			os.Exit(1)
		}
		return
	}
	keys := make([]string, 0, len(result))
	for k := range result {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("%s: %v\n", k, result[k])
	}
}

// Micros converts a duration to float microseconds.
func Micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
