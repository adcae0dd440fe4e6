package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/concordmap/concord/node/client/agentbridge"
	"github.com/concordmap/concord/node/client/mapclient"
)

type agentFlags struct {
	conn         connFlags
	name         string
	execCmd      string
	persona      string
	script       string
	concurrency  int
	queue        int
	taskTimeout  time.Duration
	maxOutput    int64
	gracePeriod  time.Duration
	replyTimeout time.Duration
	think        time.Duration
}

func newAgentCmd() *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Serve as a MAP agent that answers consensus run tasks",
		Long: `Connect to a Concord system as the agent --name and answer the tasks of
consensus runs that name it as a participant, with one of:

  --exec "CMD"     run CMD with sh -c per task: the task JSON on stdin, the answer
                   (a JSON object; prose and ` + "```json" + ` fences around it are fine)
                   on stdout. Non-zero exit, no JSON, or running past the task's
                   timeout (the process group is killed) sends an error answer.
  --persona STYLE  deterministic made-up answers (no LLM): style "default".
  --script FILE    answers from a consensus answers script.

On connection loss it resumes its session on the next --server URL, so the agent
stays registered. SIGINT/SIGTERM stop it cleanly (running tasks are answered
with an error, the agent is unregistered).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAgent(cmd, &f) },
	}
	f.conn.register(cmd)
	// An agent may start before the system: wait for a server by default.
	_ = cmd.PersistentFlags().Set("connect-timeout", "0s")
	cmd.PersistentFlags().Lookup("connect-timeout").DefValue = "0s"
	d := agentbridge.DefaultConfig()
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "", "agent id to register (the participant id runs name)")
	fl.StringVar(&f.execCmd, "exec", "", "command run per task (sh -c), task JSON on stdin, answer on stdout")
	fl.StringVar(&f.persona, "persona", "", "answer with the built-in persona of this style (default)")
	fl.StringVar(&f.script, "script", "", "answer from this consensus answers file")
	fl.IntVar(&f.concurrency, "concurrency", d.Concurrency, "tasks handled at once")
	fl.IntVar(&f.queue, "queue", d.QueueLimit, "tasks that may wait for a free slot; more are refused at once")
	fl.DurationVar(&f.taskTimeout, "task-timeout", d.TaskTimeout, "bound per task when the task message carries no deadline")
	fl.Int64Var(&f.maxOutput, "max-output", agentbridge.DefaultExecConfig().MaxOutputBytes, "--exec: largest stdout accepted, in bytes")
	fl.DurationVar(&f.gracePeriod, "grace-period", 0, "how long the server keeps the agent registered after a connection loss (default: reconnect timeout + 30s)")
	fl.DurationVar(&f.think, "think", 0, "delay every answer by this long, as a model would (demos)")
	fl.DurationVar(&f.replyTimeout, "reply-timeout", d.ReplyTimeout, "how long a reply keeps retrying after the task's deadline; bound on stopping")
	return cmd
}

func runAgent(cmd *cobra.Command, f *agentFlags) error {
	if f.name == "" {
		return fmt.Errorf("--name is required")
	}
	n := 0
	for _, s := range []string{f.execCmd, f.persona, f.script} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("give exactly one of --exec, --persona, --script")
	}
	handler, err := agentHandler(f)
	if err != nil {
		return err
	}
	handler = agentbridge.WithThinkTime(handler, f.think)
	client, err := f.conn.client()
	if err != nil {
		return err
	}
	if f.gracePeriod > 0 {
		client.DisconnectPolicy = &mapclient.DisconnectPolicy{AgentBehavior: "grace-period", GracePeriodMs: f.gracePeriod.Milliseconds()}
	}
	cfg := agentbridge.DefaultConfig()
	cfg.AgentID, cfg.Name, cfg.Handler = f.name, f.name, handler
	cfg.Concurrency, cfg.QueueLimit, cfg.TaskTimeout, cfg.ReplyTimeout = f.concurrency, f.queue, f.taskTimeout, f.replyTimeout
	cfg.Logger = client.Logger
	fmt.Fprintf(cmd.ErrOrStderr(), "agent %s connecting to %v\n", f.name, f.conn.urls())
	return agentbridge.Serve(cmd.Context(), cfg, client, f.conn.connectTimeout)
}

func agentHandler(f *agentFlags) (agentbridge.Handler, error) {
	switch {
	case f.execCmd != "":
		ec := agentbridge.DefaultExecConfig()
		ec.Command, ec.MaxOutputBytes = f.execCmd, f.maxOutput
		return agentbridge.NewExecHandler(ec)
	case f.persona != "":
		return agentbridge.NewPersonaHandler(f.persona)
	}
	h, err := agentbridge.LoadScriptHandler(f.script)
	if err != nil {
		return nil, fmt.Errorf("--script: %w", err)
	}
	return h, nil
}
