// A go-liftbridge v2.4.0 consumer-group member for the mixed Go/Python group test.
//
// Usage: go_consumer <address> <group> <stream> <consumer-id>
// Prints "joined", then "<partition> <value>" per message; on stdin EOF it checkpoints,
// leaves the group (Close) and prints "closed".
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	lift "github.com/liftbridge-io/go-liftbridge/v2"
)

func main() {
	addr, group, stream, id := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	client, err := lift.Connect([]string{addr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		os.Exit(1)
	}
	defer client.Close()
	consumer, err := client.CreateConsumer(group, lift.ConsumerID(id), lift.AutoOffsetEarliest(),
		lift.AutoCheckpoint(200*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	ctx, cancel := context.WithCancel(context.Background())
	err = consumer.Subscribe(ctx, []string{stream}, func(msg *lift.Message, err error) {
		if err != nil {
			fmt.Fprintln(os.Stderr, "handler:", err)
			return
		}
		mu.Lock()
		fmt.Printf("%d %s\n", msg.Partition(), string(msg.Value()))
		mu.Unlock()
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "subscribe:", err)
		os.Exit(1)
	}
	fmt.Println("joined")
	reader := bufio.NewReader(os.Stdin)
	_, _ = reader.ReadString('\n')
	mu.Lock()
	_ = consumer.Checkpoint(context.Background())
	mu.Unlock()
	if err := consumer.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
	}
	cancel()
	fmt.Println("closed")
}
