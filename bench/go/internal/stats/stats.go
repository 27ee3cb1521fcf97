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

// Usage is a snapshot of this process's resource usage.
type Usage struct {
	User, Sys float64 // CPU seconds
	Switches  int64   // voluntary + involuntary context switches
}

// Now returns the resource usage of this process (all threads) so far.
func Now() Usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Usage{}
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return Usage{tv(ru.Utime), tv(ru.Stime), ru.Nvcsw + ru.Nivcsw}
}

// AddUsage puts the usage between before and after into result.
func AddUsage(result map[string]any, before, after Usage) {
	result["cpu_user_s"] = after.User - before.User
	result["cpu_sys_s"] = after.Sys - before.Sys
	result["context_switches"] = after.Switches - before.Switches
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
