"""The slow agent: decomposes the task, decides code or RL per sub-action, re-plans.

Outer loop: plan (the task planner's ordered steps from the recipe knowledge, plus the
survival needs it will watch) → have the fast agent work on every sub-action not yet
accepted (needs first, then the task's steps in dependency order; independent ones at
once) → read the critiques the critic streamed and the measured rates → revise the plan
(a coded sub-action that stayed under its target moves to RL with coded high-level
actions; a fixable one is redone) → stop on the task's target or a budget. Then the
final policy — the task planner sequencing the best coded or learned stage of every
sub-action, serving needs as they trigger — is evaluated on worlds never seen before.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, get_args

import trio

from knowledge import recipes, survival
from llm.contracts import resolve_achievement, subtask_achievement
from llm.errors import TokenBudgetSpent
from messages import Envelope
from messages.plan import Critique, Plan, RunTask, SubAction, SubActionOutcome, TaskReport, WorkOn
from messages.rollout import RolloutRequest, RolloutResult
from messages.task import Need, NeedStat, Stage, Subtask
from method import games, ledger, seeds
from method.agents import AgentCallFailed, Agents
from method.journal import job_key
from method.paired import chosen_version, join_incumbent, usable
from method.settings import ALL_ACHIEVEMENTS, FINAL_WALL_S, MethodSettings
from method.split import rollout_split, whole_parts
from method.video import video_episodes
from runtime.actor import Actor, handles
from runtime.events import log

NEED_STATS: tuple[str, ...] = get_args(NeedStat)
"""What a survival need may watch: the vital statistics the world reports, and the
daylight the player sees (sheltering at dusk)."""


class SlowAgent(Actor):
    """Role ``slow``: answers :class:`RunTask` with a :class:`TaskReport`."""

    role = "slow"
    can_learn = True

    def __init__(
        self,
        *,
        agents: Agents,
        settings: MethodSettings,
        environments: int,
        can_learn: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.can_learn = can_learn
        """Whether a learner can take a training job: one is configured, or the head
        listens for attached ones. Without, a sub-action a model puts on RL stays coded
        (``plan_mode_refused``) instead of waiting for a learner that never comes."""
        self.agents = agents
        """The run's backend, journal and token budget."""
        self.settings = settings
        """The run's settings (task budgets, seed)."""
        self.environments = max(1, environments)
        """Environment actors to spread an evaluation over."""
        self.critiques: list[Critique] = []
        """Every critique the critic streamed, in arrival order."""
        self._need_list: list[Need] = []
        """The survival needs of the current plan, served in every composed episode."""
        self.final: tuple[RolloutRequest, RolloutResult] | None = None
        """The final evaluation's request and result (None before it, or with no stage):
        the head bundles the policy and picks the report's video episodes from it."""

    @handles(Critique)
    def on_critique(self, critique: Critique, env: Envelope) -> None:
        self.critiques.append(critique)

    # ------------------------------------------------------------------ the outer loop

    @handles(RunTask)
    async def on_task(self, task: RunTask, env: Envelope) -> TaskReport:
        curriculum = task.target_item == ALL_ACHIEVEMENTS
        world = self.settings.task.world
        steps = recipes.describe(games.plan_steps(world, task.target_item))
        # Survival needs are Crafter's (Minetest's game has no hunger, thirst or mobs).
        needs_known = needs_table() if world == "crafter" else []
        plans: list[Plan] = []
        outcomes: dict[str, list[SubActionOutcome]] = {}
        history: list[dict[str, float]] = []
        stop_reason = "iterations"
        spent = _Spent()
        try:
            plan = await self._first_plan(task, steps, needs_known, curriculum)
        except (AgentCallFailed, TokenBudgetSpent) as exc:
            log.error("planning_failed", detail=str(exc))
            return TaskReport([], [], 0.0, 0, [], "planning_failed")
        plans.append(plan)
        self._log_plan(plan)
        redo: dict[str, str] = {}
        wall_s = self.settings.task.wall_s
        deadline = trio.current_time() + wall_s if wall_s > 0 else float("inf")
        for iteration in range(1, task.iterations + 1):
            log.info("iteration_started", iteration=iteration, plan_version=plan.version)
            try:
                with trio.move_on_at(deadline) as scope:
                    await self._work(task, plan, outcomes, redo, iteration, spent)
            except TokenBudgetSpent as exc:
                stop_reason = "tokens"
                log.warning("budget_spent", kind="tokens", detail=str(exc))
                break
            if scope.cancelled_caught:
                # Work under way is cancelled (its asks tell the workers to stop); what
                # finished is kept and the final policy is composed from it.
                stop_reason = "wall_time"
                log.warning("budget_spent", kind="wall_time", budget_s=wall_s)
            rates = {
                name: round(chosen_version(outs).success_rate, 4) for name, outs in outcomes.items()
            }
            last = plan.subactions[-1].name
            task_rate = self._task_rate(outcomes.get(last, []))
            history.append({**rates, "task": task_rate})
            used = spent.total
            log.info(
                "iteration_finished",
                iteration=iteration,
                task_success=task_rate,
                env_steps=used,
                **{f"rate_{k}": v for k, v in rates.items()},
            )
            if stop_reason == "wall_time":
                break
            done = _met_or_spent(task, plan, outcomes, task_rate, used)
            if done or iteration == task.iterations:
                stop_reason = done or stop_reason
                break
            try:
                revised = await self._revise(task, plan, outcomes, task_rate, iteration, used)
            except TokenBudgetSpent as exc:
                stop_reason = "tokens"
                log.warning("budget_spent", kind="tokens", detail=str(exc))
                break
            except AgentCallFailed as exc:
                log.error("revision_failed", detail=str(exc))
                break
            if revised is None:
                stop_reason = "no_changes"
                break
            plan, redo = revised
            plans.append(plan)
            self._log_plan(plan)
        return await self._finish(task, plans, plan, outcomes, history, stop_reason, spent)

    async def _work(
        self,
        task: RunTask,
        plan: Plan,
        outcomes: dict[str, list[SubActionOutcome]],
        redo: dict[str, str],
        iteration: int,
        spent: _Spent,
    ) -> None:
        """One pass of the inner loops over every sub-action that still needs work: each
        starts once the ancestors it waits for are done (:func:`schedule`), and asks the
        fast agent for its inner loop (:meth:`_work_on`)."""
        settings = self.settings.task

        def pending(sub: SubAction) -> bool:
            # Redo what the revision named; otherwise work once per mode.
            have = outcomes.get(sub.name, [])
            return sub.name in redo or not any(o.mode == sub.mode for o in have)

        todo = {s.name for s in plan.subactions if not s.need and pending(s)}
        at_start = {name: list(outs) for name, outs in outcomes.items()}
        waits, ahead = schedule(plan, todo, at_start)
        # The env-step budget reaches into training: each RL sub-action, when it starts,
        # gets an equal share of what is left (less what running ones were given) for
        # its training jobs, so an iteration cannot overrun the budget by whole jobs.
        shares = Shares(
            settings.env_steps,
            spent,
            {s.name for s in plan.subactions if not s.need and s.mode == "rl" and pending(s)},
            train_cap=int(settings.env_steps * settings.train_share),
        )
        p = _Pass(
            task=task,
            plan=plan,
            outcomes=outcomes,
            redo=redo,
            iteration=iteration,
            spent=spent,
            todo=todo,
            at_start=at_start,
            waits=waits,
            ahead=ahead,
            shares=shares,
            done={s.name: trio.Event() for s in plan.subactions},
        )
        needs = list(self._need_list)
        async with trio.open_nursery() as nursery:
            for sub in plan.subactions:
                if not sub.need:
                    nursery.start_soon(self._run_one, p, sub, needs)
        for name, early in ahead.items():
            for d in early:
                then, now = chosen_version(at_start[d]).stage, chosen_version(outcomes[d]).stage
                if then != now:
                    # Its versions were measured after the ancestor's earlier version:
                    # paired among themselves, but the final policy composes the new one.
                    log.warning("measured_before_changed", subaction=name, ancestor=d)

    async def _run_one(self, p: _Pass, sub: SubAction, needs: list[Need]) -> None:
        """Wait for the ancestors ``sub`` waits for, then work on it if it is to do;
        always release its share and say it is done."""
        try:
            for dep in p.waits[sub.name]:
                await p.done[dep].wait()
            early = p.ahead.get(sub.name, [])
            if early:
                log.info("subaction_ahead", subaction=sub.name, of=early)

            def versions(d: str) -> list[SubActionOutcome]:
                return p.at_start.get(d, []) if d in early else p.outcomes.get(d, [])

            # (An ancestor with no usable version is left out, never composed empty.)
            ancestors = [
                d
                for d in self._ancestors(p.plan, sub)
                if versions(d) and usable(chosen_version(versions(d)))
            ]
            before = [chosen_version(versions(d)).stage for d in ancestors]
            setup = [self._coded(versions(d)) for d in ancestors]
            if sub.name in p.todo:
                await self._work_on(p, sub, needs, before, [st for st in setup if st is not None])
        finally:
            p.shares.release(sub.name)
            p.done[sub.name].set()

    async def _work_on(
        self, p: _Pass, sub: SubAction, needs: list[Need], before: list[Stage], setup: list[Stage]
    ) -> None:
        """Ask the fast agent for ``sub``'s inner loop, composed after ``before`` (its
        training setup running ``setup``), measured against the version the run stands on;
        a learning sub-action with no version yet has its own code written first."""
        settings = self.settings.task
        outcomes = p.outcomes
        base = WorkOn(
            subaction=sub,
            before=before,
            needs=needs,
            iteration=p.iteration,
            seeds=list(p.task.code_seeds),
            revisions=settings.revisions,
            train_steps=settings.train_steps,
            hint=p.redo.get(sub.name, ""),
            setup=setup,
        )
        if sub.mode == "rl" and settings.learn_over_code and not outcomes.get(sub.name):
            # RL first, over the step's own first code: written and measured
            # once (no revisions), then the code PPO learns over and the
            # version each learned one is measured against.
            log.info("code_before_learning", subaction=sub.name)
            code = dataclasses.replace(sub, mode="code")
            first = dataclasses.replace(base, subaction=code, revisions=0)
            coded: SubActionOutcome = await self.ask("@fast", first, expect=SubActionOutcome)
            outcomes.setdefault(sub.name, []).append(coded)
            p.spent.add(coded)
        # The version the run stands on (of either mode): this loop's versions
        # are measured against it on enough worlds to decide. Paired only on
        # the worlds both loops drew, a redo's version at 0.67 lost to a kept
        # 0.10 (BENCHMARKS.md, "From the simplest templates at 1M").
        prior = outcomes.get(sub.name, [])
        kept = chosen_version(prior) if prior else None
        if kept is not None and not usable(kept):
            kept = None
        work = dataclasses.replace(
            base,
            env_steps_cap=p.shares.take(sub.name),
            incumbent=kept.stage if kept is not None else None,
        )
        outcome: SubActionOutcome = await self.ask("@fast", work, expect=SubActionOutcome)
        if kept is not None:
            join_incumbent(prior, kept, outcome)
        outcomes.setdefault(sub.name, []).append(outcome)
        p.spent.add(outcome)

    async def _revise(
        self,
        task: RunTask,
        plan: Plan,
        outcomes: dict[str, list[SubActionOutcome]],
        task_rate: float,
        iteration: int,
        used: int,
    ) -> tuple[Plan, dict[str, str]] | None:
        request = revise_request(task, plan, outcomes, task_rate, iteration, used)
        reply = await self.agents.call("slow", "revise", request)
        changes = {}
        for c in reply.get("changes", []):
            name = plan_name(plan, c["subaction"])
            if name is None:  # a model's name for no sub-action of the plan: said, not fatal
                log.warning(
                    "plan_change_ignored", subaction=c["subaction"], change=c.get("change"),
                    cause="no sub-action of the plan has that name",
                    plan=[sub.name for sub in plan.subactions],
                )  # fmt: skip
            elif c.get("change") != "keep":
                changes[name] = c
        for name in [n for n in changes if _unreached(outcomes.get(n, []))]:
            # Never reached: nothing is known of it, its predecessors are at fault. It is
            # not moved to RL (nor redone) for them; it keeps its version and mode.
            log.info("plan_change_refused", subaction=name, reason="not reached")
            del changes[name]
        if reply.get("stop") or not changes:
            forced = self._overrule(plan, outcomes)
            if forced is None:
                log.info("plan_kept", reason=reply.get("reason", ""))
                return None
            name, change = forced
            sub = next(s for s in plan.subactions if s.name == name)
            best = chosen_version(outcomes[name])
            log.warning(
                "plan_stop_overruled", subaction=name, change=change["change"],
                success_rate=round(best.success_rate, 4), target=sub.target,
                reply_stop=bool(reply.get("stop")), reply_changes=len(changes),
                reply_reason=str(reply.get("reason", ""))[:300],
            )  # fmt: skip
            changes = {name: change}
        subs, redo = [], {}
        for sub in plan.subactions:
            change = changes.get(sub.name)
            if change is None:
                subs.append(sub)
                continue
            kind = change["change"]
            mode = self._mode({"to_rl": "rl", "to_code": "code"}.get(kind, sub.mode), sub.name)
            new = dataclasses.replace(
                sub,
                mode=mode,
                options=list(change.get("options") or sub.options),
                reason=change.get("reason", ""),
            )
            redo[sub.name] = change.get("reason", "")
            log.info(
                "plan_decision",
                subaction=sub.name,
                change=kind,
                mode=mode,
                reason=change.get("reason", ""),
            )
            subs.append(new)
        revised = dataclasses.replace(
            plan, version=plan.version + 1, subactions=subs, reason=reply.get("reason", "")
        )
        return revised, redo

    def _overrule(
        self, plan: Plan, outcomes: dict[str, list[SubActionOutcome]]
    ) -> tuple[str, dict[str, str]] | None:
        """The change the measurements ask for when a backend answers a revision with
        "stop", "keep" or no change: the first step of the plan that was reached and is
        measurably under its target (its best version not accepted) and still has a move
        left, with that move; None when no step does. A coded step goes to RL, as the
        paper's slow agent moves it (redone as code when no learner can train, unless
        its code is exhausted); a learned one trains again unless its last round did
        not raise it. Called only while budget remains (the loop revises only then), so
        a model's stop cannot end a run whose rates say it is not done, and the rule is
        the same for every backend."""
        for sub in plan.subactions:
            outs = outcomes.get(sub.name, [])
            if sub.need or not outs or _unreached(outs):
                continue
            best = chosen_version(outs)
            if best.accepted or best.success_rate >= sub.target:
                continue
            why = (
                f"measured {best.success_rate:.2f} < target {sub.target:.2f} with budget "
                "left: the backend's stop is overruled by the measured rates"
            )
            if sub.mode == "code" and self.can_learn:
                return sub.name, {"change": "to_rl", "reason": f"{why}; learn it with PPO"}
            if sub.mode == "code" and not outs[-1].exhausted:
                return sub.name, {"change": "redo", "reason": f"{why}; no learner: code again"}
            if sub.mode == "rl" and not _stalled(outs):
                return sub.name, {"change": "redo", "reason": f"{why}; train it again"}
        return None

    # ------------------------------------------------------------------ the final policy

    async def _finish(
        self,
        task: RunTask,
        plans: list[Plan],
        plan: Plan,
        outcomes: dict[str, list[SubActionOutcome]],
        history: list[dict[str, float]],
        stop_reason: str,
        spent: _Spent,
    ) -> TaskReport:
        stages = self._final_stages(plan, outcomes)
        needs = list(self._need_list)
        eval_steps, rate, achievements = 0, 0.0, {}
        if stages:
            eval_steps, rate, achievements = await self._final_evaluation(
                task, stages, needs, spent
            )
        return TaskReport(
            plans=plans,
            outcomes=[o for outs in outcomes.values() for o in outs],
            final_success=rate,
            final_episodes=len(task.eval_seeds),
            history=history,
            stop_reason=stop_reason,
            code_steps=spent.code,
            train_steps=spent.train,
            eval_steps=eval_steps,
            stages=stages,
            needs=needs,
            achievements=achievements,
        )

    def _final_stages(self, plan: Plan, outcomes: dict[str, list[SubActionOutcome]]) -> list[Stage]:
        """The stage the run stands on for each sub-action of ``plan``, in its order."""
        stages = []
        for s in plan.subactions:
            if s.need or not outcomes.get(s.name):
                continue
            chosen = chosen_version(outcomes[s.name])
            if not usable(chosen):
                # Nothing was ever written for it (its training failed, say): no empty
                # stage goes into the policy; the episode's planner goes on without it.
                log.warning("stage_missing", subaction=s.name, reason="no usable version")
                continue
            stages.append(chosen.stage)
        for sub in plan.subactions:
            if (
                not sub.need
                and outcomes.get(sub.name)
                and usable(chosen_version(outcomes[sub.name]))
            ):
                chosen = chosen_version(outcomes[sub.name])
                log.info(
                    "final_stage",
                    subaction=sub.name,
                    mode=chosen.mode,
                    success_rate=chosen.success_rate,
                    coded_rate=self._rate(outcomes[sub.name], "code"),
                    learned_rate=self._rate(outcomes[sub.name], "rl"),
                )
        return stages

    async def _final_evaluation(
        self, task: RunTask, stages: list[Stage], needs: list[Need], spent: _Spent
    ) -> tuple[int, float, dict[str, float]]:
        """The composed policy on the evaluation worlds (then, with ``play_to_budget``,
        on fresh worlds until the budget is spent): its env steps, success rate and the
        share of episodes that unlocked each achievement."""
        world = self.settings.task.world
        achievements = games.achievements(world)
        known = [*achievements, ALL_ACHIEVEMENTS]
        goal = Subtask(
            # Every achievement: no single test; the episode runs until every stage's
            # test held, the player dies or Crafter's episode ends.
            name=task.target_item,
            description=task.task,
            goal={task.target_item: 1} if task.target_item not in known else {},
            achievement=task.target_item if task.target_item in achievements else "",
            max_steps=self.settings.task.episode_steps,
        )
        req = RolloutRequest(
            subtask=goal, seeds=list(task.eval_seeds), wall_s=FINAL_WALL_S, stages=stages,
            needs=needs, skip_failed=task.target_item == ALL_ACHIEVEMENTS, world=world,
        )  # fmt: skip
        log.info("final_evaluation_started", episodes=len(req.seeds), stages=len(stages))
        result = self.agents.journal.job(req)
        if result is None:
            result = await rollout_split(self, req, whole_parts(self.environments, len(req.seeds)))
            # Booked before it is recorded: a kill between the two redoes the job,
            # whose lines replace these (the ledger's ids) instead of going missing.
            ledger.append(self.run_dir, ledger.rollout_lines("final", result, job_key(req)))
            self.agents.journal.record_job(req, result, name="final")
        self.final = (req, result)
        counts: dict[str, int] = {}
        for e in result.episodes:
            for name in set(e.achievements):
                counts[name] = counts.get(name, 0) + 1
        achievements = {k: v / len(result.episodes) for k, v in sorted(counts.items())}
        log.info(
            "final_evaluation_finished",
            success_rate=result.success_rate,
            episodes=len(result.episodes),
            steps=result.steps,
        )
        if self.settings.task.play_to_budget:
            used = spent.total + result.steps
            mean = result.steps / max(1, len(result.episodes))
            # The report's video episodes are kept out (re-played after).
            video = sum(e.steps for e in video_episodes(result.episodes))
            await self._play(req, task.env_steps - used - video, mean)
        return result.steps, result.success_rate, achievements

    async def _play(self, final: RolloutRequest, left: int, mean_steps: float) -> None:
        """Play the final policy on fresh worlds until ``left`` env steps are spent, as a
        learning agent goes on playing until its budget ends: the scoreboard protocol
        counts every episode within the budget. Every episode played is booked (each
        step the run took is counted), in seed order; rounds are sized to use about half
        of what is left, and the last episode is capped at what is left, so the play
        stays within ``left`` unless a round's episodes run far above their mean."""
        base = seeds.play_seeds(self.settings.run.seed).start
        played, steps, k = 0, 0, 0
        log.info("play_started", env_steps=left)
        while steps < left and k < 100_000:
            need = (left - steps) / max(mean_steps, 1.0)
            chunk = int(min(need // 2, 32 * self.environments))
            req = final
            if chunk < 1:  # the last episode: capped at what is left of the budget
                chunk = 1
                cap = min(final.subtask.max_steps, left - steps)
                req = dataclasses.replace(
                    final, subtask=dataclasses.replace(final.subtask, max_steps=cap)
                )
            req = dataclasses.replace(req, seeds=list(range(base + k, base + k + chunk)))
            k += chunk
            result = self.agents.journal.job(req)
            fresh = result is None
            if fresh:
                result = await rollout_split(
                    self, req, whole_parts(self.environments, len(req.seeds))
                )
            taken = sum(e.steps for e in result.episodes)
            steps += taken
            played += len(result.episodes)
            if fresh:  # booked before it is recorded, as the final evaluation
                ledger.append(self.run_dir, ledger.rollout_lines("play", result, job_key(req)))
                self.agents.journal.record_job(req, result, name="play")
            if taken == 0:
                break  # nothing can be played (the policy takes no step)
            log.info("play_progress", episodes=played, env_steps=steps, budget=left)
        log.info("play_finished", episodes=played, env_steps=steps)

    # ------------------------------------------------------------------ helpers

    async def _first_plan(
        self, task: RunTask, steps: list[dict[str, Any]], needs_known: list[dict], curriculum: bool
    ) -> Plan:
        """The backend's plan for ``task``. A plan that stops short of the target (a small
        model copies its example's three steps) is asked for once more, told which steps
        of the recipe chain it left out; still short, those steps are added to it from the
        chain (``plan_completed``), the sub-actions' code still the backend's to write."""
        request = plan_request(task, self.settings, steps, needs_known)
        reply = await self.agents.call("slow", "plan", request)
        plan = self._plan_from(task, reply, needs_known, version=1)
        missing = [] if curriculum else unplanned(plan, steps)
        if not missing:
            return plan
        names = [step["name"] for step in missing]
        log.warning("plan_short", subactions=[s.name for s in plan.subactions], missing=names)
        again = {
            **request,
            "short": f"Your last plan ended before the target ({task.target_item}): it "
            f"left out {', '.join(names)}. Plan every step up to the target.",
        }
        reply = await self.agents.call("slow", "plan", again)
        plan = self._plan_from(task, reply, needs_known, version=1)
        missing = unplanned(plan, steps)
        if not missing:
            return plan
        last = plan.subactions[-1].name if plan.subactions else ""
        added = []
        for step in missing:
            added.append(
                {
                    **{k: step[k] for k in ("name", "description", "goal", "max_steps")},
                    "achievement": step.get("achievement", ""),
                    "depends": [last] if last else [],
                    "mode": "rl" if step["name"] in self.settings.task.learn else "code",
                    "reason": "added from the recipe chain: the plan stopped before the target",
                }
            )
            last = step["name"]
        log.warning("plan_completed", added=[a["name"] for a in added], source="recipe chain")
        reply = {**reply, "subactions": [*reply["subactions"], *added]}
        return self._plan_from(task, reply, needs_known, version=1)

    def _plan_from(self, task: RunTask, reply: dict, needs_known: list[dict], version: int) -> Plan:
        subs: list[SubAction] = []
        stats = set(reply.get("needs", []))
        self._need_list = [
            Need(
                stat=need["stat"],
                below=float(need["below"]),
                stage=Stage(
                    Subtask(need["name"], need["description"], max_steps=int(need["max_steps"])),
                    code=need["code"],
                ),
                until=float(need["until"]),
            )
            for need in needs_known
            if need["stat"] in stats
        ]
        entries = reply["subactions"]
        for s in entries:
            goal = {k: int(v) for k, v in (s.get("goal") or {}).items()}
            subs.append(
                SubAction(
                    name=s["name"],
                    subtask=Subtask(
                        name=s["name"],
                        description=s.get("description", ""),
                        goal=goal,
                        # With an inventory goal, the goal is the test: an achievement
                        # would hold at the first item of several.
                        achievement="" if goal else s.get("achievement", ""),
                        max_steps=int(s.get("max_steps", 1000)),
                    ),
                    mode=self._mode(s.get("mode", "code"), s["name"]),
                    depends=list(s.get("depends", [])),
                    # Every step answers to the sub-action target, the last one too: the
                    # task's success is the product of the steps' rates along the chain.
                    target=float(s.get("target", self.settings.task.sub_target)),
                    options=list(s.get("options", [])),
                    reason=s.get("reason", ""),
                    description=s.get("description", ""),
                )
            )
        return Plan(
            task=task.task,
            version=version,
            subactions=subs,
            needs=sorted(stats),
            reason=reply.get("reason", ""),
        )

    def _mode(self, mode: str, name: str) -> str:
        """``mode`` as the plan may have it: ``rl`` only when a learner can train."""
        if mode == "rl" and not self.can_learn:
            log.warning(
                "plan_mode_refused", subaction=name, mode="rl", kept="code",
                reason="no learner actor: set [actors.learner] count = 1 (or [runtime] "
                "listen and attach one) to let sub-actions learn",
            )  # fmt: skip
            return "code"
        return mode

    def _log_plan(self, plan: Plan) -> None:
        log.info(
            "plan_made" if plan.version == 1 else "plan_revised",
            version=plan.version,
            subactions=[f"{s.name}:{s.mode}" for s in plan.subactions],
            reason=plan.reason[:300],
        )

    @staticmethod
    def _ancestors(plan: Plan, sub: SubAction) -> list[str]:
        by_name = {s.name: s for s in plan.subactions}
        seen: set[str] = set()
        stack = list(sub.depends)
        while stack:
            name = stack.pop()
            if name in seen or name not in by_name:
                continue
            seen.add(name)
            stack.extend(by_name[name].depends)
        return [s.name for s in plan.subactions if s.name in seen]

    @staticmethod
    def _coded(outs: list[SubActionOutcome]) -> Stage | None:
        """The best coded version (for a training setup), None if there is none."""
        coded = [o for o in outs if o.mode == "code" and o.stage.code]
        return max(coded, key=lambda o: o.success_rate).stage if coded else None

    @staticmethod
    def _rate(outs: list[SubActionOutcome], mode: str) -> float:
        rates = [
            o.success_rate for o in outs if o.mode == mode and o.stage.code + o.stage.policy_path
        ]
        return max(rates) if rates else -1.0

    @staticmethod
    def _task_rate(outs: list[SubActionOutcome]) -> float:
        return max((o.task_rate for o in outs), default=0.0)


class Shares:
    """Each learning sub-action's share of the env steps left, taken when it starts:
    what the budget has left (and, under ``train_cap``, what training has left of its
    cap), less what the inner loops spent and what running ones were given, split
    equally among those still to start. An iteration whose learning
    sub-actions all start together thus stays inside the budget (each job stops at its
    cap: ``TrainRequest.max_world_steps``), and one that starts late gets what the
    early ones left."""

    def __init__(
        self, budget: int, spent: _Spent, waiting: set[str], train_cap: int | None = None
    ) -> None:
        self.budget = budget
        self.train_cap = budget if train_cap is None else train_cap
        """The most training may spend in all (``[task] train_share`` of the budget)."""
        self.spent = spent
        self.waiting = set(waiting)
        """Learning sub-actions of this pass not started yet."""
        self.given: dict[str, int] = {}
        """Running learning sub-action → its share."""

    def take(self, name: str) -> int:
        """``name``'s share (world steps, ≥ 1: 1 means nothing is left to train on), or
        0 (no cap) for a sub-action that is not one of the waiting learning ones."""
        if name not in self.waiting:
            return 0
        free = min(self.budget - self.spent.total, self.train_cap - self.spent.train)
        left = free - sum(self.given.values())
        share = max(1, left // len(self.waiting))
        self.waiting.discard(name)
        self.given[name] = share
        return share

    def release(self, name: str) -> None:
        """``name`` ended (what it spent is in ``spent`` now), or never started."""
        self.given.pop(name, None)
        self.waiting.discard(name)


@dataclasses.dataclass
class _Spent:
    """World steps the inner loops spent so far, against the task's ``env_steps``."""

    code: int = 0
    """Steps of the evaluation episodes of every version."""
    train: int = 0
    """Steps of PPO training, its held-out evaluation included."""

    @property
    def total(self) -> int:
        """Every step spent so far."""
        return self.code + self.train

    def add(self, outcome: SubActionOutcome) -> None:
        """Count what one inner loop spent."""
        self.code += outcome.code_steps
        self.train += outcome.train_steps


def schedule(
    plan: Plan,
    todo: set[str],
    at_start: dict[str, list[SubActionOutcome]],
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """What each sub-action of a pass waits for, and which ancestors still to work on it
    starts ahead of (those to work on in ``todo``; ``at_start``: the outcomes when the
    pass began).

    Fixed before anything starts (so the result does not depend on which inner loop ends
    first): a sub-action waits for an ancestor still to work on whose work could change
    the coded versions its setup uses. An ancestor that relearns in RL and already has a
    usable version and a coded one (from an earlier iteration) cannot: its RL work adds
    learned versions only. Such an ancestor is not waited for; the sub-action starts at
    once and is measured after the ancestor's version chosen when this pass began, the
    same for every one of its versions, so their comparison stays paired
    (``subaction_ahead``). Two RL sub-actions of a chain thus train at once on two
    learners instead of one after the other."""
    by_name = {s.name: s for s in plan.subactions}

    def holds_up(name: str) -> bool:
        if name not in todo:
            return False
        if by_name[name].mode != "rl":
            return True
        outs = at_start.get(name, [])
        return not (outs and usable(chosen_version(outs)) and SlowAgent._coded(outs) is not None)

    ahead: dict[str, list[str]] = {}
    waits: dict[str, list[str]] = {}
    for s in plan.subactions:
        line = SlowAgent._ancestors(plan, s)
        waits[s.name] = [a for a in line if holds_up(a)]
        if s.name in todo:
            ahead[s.name] = [a for a in line if a in todo and a not in waits[s.name]]
    return waits, ahead


@dataclasses.dataclass
class _Pass:
    """One pass of :meth:`SlowAgent._work`: what its sub-actions' tasks share."""

    task: RunTask
    plan: Plan
    outcomes: dict[str, list[SubActionOutcome]]
    """Every sub-action's outcomes so far (this pass appends to them)."""
    redo: dict[str, str]
    """Sub-actions the last revision named, with its reason (the fast agent's hint)."""
    iteration: int
    spent: _Spent
    todo: set[str]
    """Sub-actions this pass works on."""
    at_start: dict[str, list[SubActionOutcome]]
    """The outcomes as they were when the pass began."""
    waits: dict[str, list[str]]
    """Sub-action → the ancestors it waits for (:func:`schedule`)."""
    ahead: dict[str, list[str]]
    """Sub-action → the ancestors to work on that it starts ahead of."""
    shares: Shares
    done: dict[str, trio.Event]
    """Sub-action → set once its work in this pass ended (or it had none)."""


def revise_request(
    task: RunTask,
    plan: Plan,
    outcomes: dict[str, list[SubActionOutcome]],
    task_rate: float,
    iteration: int,
    used: int,
) -> dict[str, Any]:
    """What the slow agent tells its backend to revise the plan: every sub-action's
    measured rate, the critic's last verdict and cause, and whether code has run out of
    answers (``exhausted``: the fast agent said its code cannot change; ``stalled``: the
    last round did not raise it) — what decides code or RL."""
    summary = []
    for sub in plan.subactions:
        outs = outcomes.get(sub.name, [])
        last = outs[-1] if outs else None
        critique = last.critiques[-1] if last and last.critiques else None
        summary.append(
            {
                "name": sub.name,
                "mode": sub.mode,
                "target": sub.target,
                "success_rate": round(chosen_version(outs).success_rate, 4) if outs else 0.0,
                "accepted": bool(outs) and chosen_version(outs).accepted,
                "verdict": critique.verdict if critique else "revise",
                "cause": critique.cause if critique else "",
                "advice": critique.advice if critique else "",
                "versions": sum(o.versions for o in outs),
                "exhausted": bool(outs) and outs[-1].exhausted and not _unreached(outs),
                "stalled": _stalled(outs) and not _unreached(outs),
                "reached": not _unreached(outs),
            }
        )
    return {
        "task": task.task,
        "iteration": iteration,
        "success_target": task.success_target,
        "final_success": task_rate,
        "subactions": summary,
        "budget": {
            "iterations_left": task.iterations - iteration,
            "env_steps_left": max(0, task.env_steps - used),
        },
    }


def plan_request(
    task: RunTask, settings: MethodSettings, steps: list[dict[str, Any]], needs: list[dict]
) -> dict[str, Any]:
    """What the slow agent tells its backend to plan: the target's steps from the recipe
    data and the survival needs it may watch — each need by what it does, not its code
    (the policy source stays with the slow agent: a planner needs none of it, and it was
    nine tenths of the prompt)."""
    return {
        "task": task.task,
        "target": task.target_item,
        "steps": steps,
        "needs": [{k: v for k, v in need.items() if k != "code"} for need in needs],
        "sub_target": settings.task.sub_target,
        "learn": list(settings.task.learn),
        "curriculum": task.target_item == ALL_ACHIEVEMENTS,
    }


def unplanned(plan: Plan, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recipe chain's ``steps`` after the last one a sub-action of ``plan`` reaches
    (by its achievement or its goal's item), when none reaches the last step (the
    target); [] when the plan reaches the target, however it groups the steps before."""
    reached = {
        subtask_achievement(sub.name, sub.subtask.achievement, sub.subtask.goal)
        for sub in plan.subactions
    }
    # A goal key may name alternatives (Minetest's "default:wood|default:pine_wood").
    reached |= {
        item for sub in plan.subactions for key in sub.subtask.goal for item in key.split("|")
    }
    covers = [step.get("achievement") in reached or step.get("item") in reached for step in steps]
    if not steps or covers[-1]:
        return []
    last = max((i for i, c in enumerate(covers) if c), default=-1)
    return steps[last + 1 :]


def plan_name(plan: Plan, name: str) -> str | None:
    """The plan's sub-action a model's name means: the name itself, the same name with
    case and spaces normalised (``"Collect Wood"``), or the one sub-action standing for
    the same Crafter achievement (``"get_logs"`` → ``collect_wood``); None otherwise."""
    names = [sub.name for sub in plan.subactions]
    if name in names:
        return name
    snake = "_".join(re.split(r"[^a-z0-9]+", name.lower())).strip("_")
    if snake in names:
        return snake
    meant = resolve_achievement(name)
    if meant is None:
        return None
    same = [
        sub.name
        for sub in plan.subactions
        if subtask_achievement(sub.name, sub.subtask.achievement, sub.subtask.goal) == meant
    ]
    return same[0] if len(same) == 1 else None


def _unreached(outs: list[SubActionOutcome]) -> bool:
    """Whether the sub-action's last evaluation never reached it (no episode got to its
    stage): then it is 'not reached', not failed, stalled or exhausted."""
    return bool(outs) and outs[-1].reached == 0


def _stalled(outs: list[SubActionOutcome]) -> bool:
    """Whether the last inner loop of a sub-action (a redo) did not raise its best rate
    in that mode."""
    if len(outs) < 2:
        return False
    last = outs[-1]
    before = [o.success_rate for o in outs[:-1] if o.mode == last.mode]
    return bool(before) and last.success_rate <= max(before)


def needs_table() -> list[dict[str, Any]]:
    """The survival needs the skill library knows, as the planner's request shows them."""
    return [
        {
            "name": st.name,
            "stat": st.stat,
            "below": st.below,
            "until": st.until,
            "description": st.reason,
            "max_steps": survival.NEED_MAX_STEPS,
            "code": st.source,
        }
        for st in survival.survival_stages()
        if st.stat in NEED_STATS
    ]


def _met_or_spent(
    task: RunTask,
    plan: Plan,
    outcomes: dict[str, list[SubActionOutcome]],
    task_rate: float,
    used: int,
) -> str | None:
    """Why the run stops after an iteration: ``target_met`` (the task's rate reached and
    every sub-action's version accepted), ``env_steps`` (the budget spent), else None."""
    if task_rate >= task.success_target and all(
        chosen_version(outcomes[s.name]).accepted for s in plan.subactions if s.name in outcomes
    ):
        return "target_met"
    if used >= task.env_steps:
        log.warning("budget_spent", kind="env_steps", used=used, budget=task.env_steps)
        return "env_steps"
    return None
