// Package producer is the Go producer API: an agent records "call this
// tool" intents in its own transaction, so they commit (or roll back) with
// its state, and drainer dispatches them. It depends on pgx and drainer's
// leaf packages only, not on the engine.
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, "UPDATE invoices SET state = 'charging' WHERE id = $1", inv); err != nil {
//			return err
//		}
//		key, created, err := producer.EnqueueTx(ctx, tx, producer.Intent{
//			Tuple:   idemkey.Tuple{AgentRunID: run, StepID: "charge", ToolName: "charge_card", BusinessScope: "invoice:" + inv},
//			Payload: []byte(`{"amount": 500}`),
//		})
//		...
//	})
//
// # Files
//
//	producer.go  Intent and its Validate, Producer (the schema), EnqueueTx,
//	             EnqueueBatchTx, Result
package producer
