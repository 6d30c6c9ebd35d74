// Five candidate fixes in parallel: set up a project with a failing test once, fork it five
// times, apply a different fix in each fork, and keep the one whose tests pass.
//
//   PANDASTACK_API_KEY=pds_… node examples/typescript/parallel-fixes.mjs
import { PandaStack } from "../../sdk/typescript/dist/index.js";

const client = new PandaStack();
const template = process.env.PANDASTACK_TEMPLATE ?? "base";

const BUGGY = `def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]
`;
const TEST = `from stats import median
assert median([3, 1, 2]) == 2
assert median([4, 1, 3, 2]) == 2.5, median([4, 1, 3, 2])
assert median([5]) == 5
assert median([1, 2, 10]) == 2
print("all tests passed")
`;
// What five attempts (say, from five LLM samples) came up with; only one is right.
const CANDIDATES = [
  `def median(xs):\n    xs = sorted(xs)\n    return xs[(len(xs) - 1) // 2]\n`,
  `def median(xs):\n    return sum(xs) / len(xs)\n`,
  `def median(xs):\n    xs = sorted(xs)\n    n = len(xs)\n    m = n // 2\n    return xs[m] if n % 2 else (xs[m - 1] + xs[m]) / 2\n`,
  `def median(xs):\n    xs = sorted(xs)\n    return (xs[len(xs) // 2] + xs[-len(xs) // 2]) / 2\n`,
  `def median(xs):\n    return sorted(xs)[len(xs) // 2 - 1]\n`,
];

const base = await client.sandboxes.create({ template, ttlSeconds: 600, metadata: { example: "parallel-fixes" } });
let forks = [];
try {
  await base.files.write("/work/stats.py", BUGGY);
  await base.files.write("/work/test_stats.py", TEST);
  const first = await base.exec("python3 test_stats.py", { cwd: "/work" });
  console.log(`base: exit ${first.exitCode}: ${first.stderr.trim().split("\n").at(-1)}`);

  forks = await base.fork(CANDIDATES.length);
  const results = await Promise.all(
    forks.map(async (fork, i) => {
      await fork.files.write("/work/stats.py", CANDIDATES[i]);
      const r = await fork.exec("python3 test_stats.py", { cwd: "/work", timeoutSeconds: 30 });
      console.log(`candidate ${i} in ${fork.id}: ${r.exitCode === 0 ? "PASS" : "fail"}`);
      return { fork, i, passed: r.exitCode === 0 };
    }),
  );
  const winner = results.find((r) => r.passed);
  // Keep the winner alive a moment to read its fix; everything else goes.
  await Promise.all(results.filter((r) => r !== winner).map((r) => r.fork.kill()));
  if (!winner) throw new Error("no candidate passed");
  console.log(`keeping candidate ${winner.i} (${winner.fork.id}):\n${await winner.fork.files.read("/work/stats.py")}`);
} finally {
  await Promise.all([base, ...forks].map((s) => s.kill()));
}
