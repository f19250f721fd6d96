import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.*;
import org.apache.rocketmq.filter.expression.*;
import org.apache.rocketmq.filter.parser.SelectorParser;

/** Evaluates each case with RocketMQ's own SelectorParser: P (refused), T (selected) or F. */
public class SelectorOracle {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(new FileInputStream(args[0]), StandardCharsets.UTF_8));
        PrintWriter out = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.split("\t", -1);
            String expr = parts[0].replace("\\n", "\n");
            final Map<String, String> props = new HashMap<>();
            for (int i = 1; i + 1 < parts.length; i += 2) props.put(parts[i], parts[i + 1]);
            Expression e;
            try {
                e = SelectorParser.parse(expr);
            } catch (Throwable t) {
                out.println("P");
                continue;
            }
            Object ret = null;
            try {
                ret = e.evaluate(new EvaluationContext() {
                    public Object get(String name) { return props.get(name); }
                    public Map<String, Object> keyValues() { return new HashMap<>(props); }
                });
            } catch (Throwable t) { ret = null; }
            out.println(ret instanceof Boolean && (Boolean) ret ? "T" : "F");
        }
        out.flush();
    }
}
