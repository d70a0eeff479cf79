// Asks the JVM's default ProxySelector which proxy it would use for each URL given as an argument. The JVM is
// configured only by JAVA_TOOL_OPTIONS in the environment (-Dhttp.proxyHost=... -Dhttp.nonProxyHosts=...).
// Run as a single-file source program: java Decide.java URL... . No traffic. Prints one JSON object:
// {"version": ..., "decisions": {url: {"decision": "proxy"|"bypass"|"error", "detail": ...}}}.
import java.net.Proxy;
import java.net.ProxySelector;
import java.net.URI;
import java.util.List;

public class Decide {
    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) {
        StringBuilder out = new StringBuilder("{\"version\": ");
        out.append(quote(System.getProperty("java.vm.name") + " " + Runtime.version()));
        // What the JVM made of the rest of its options: a workload's own heap flag and -D properties must survive.
        out.append(", \"maxHeap\": ").append(Runtime.getRuntime().maxMemory());
        String marker = System.getProperty("workload.marker");
        out.append(", \"marker\": ").append(marker == null ? "null" : quote(marker));
        out.append(", \"decisions\": {");
        ProxySelector selector = ProxySelector.getDefault();
        for (int i = 0; i < args.length; i++) {
            String decision, detail;
            try {
                List<Proxy> proxies = selector.select(URI.create(args[i]));
                Proxy first = proxies.isEmpty() ? Proxy.NO_PROXY : proxies.get(0);
                decision = first.type() == Proxy.Type.DIRECT ? "bypass" : "proxy";
                detail = proxies.toString();
            } catch (RuntimeException e) {
                decision = "error";
                detail = e.toString();
            }
            if (i > 0) out.append(", ");
            out.append(quote(args[i])).append(": {\"decision\": ").append(quote(decision));
            out.append(", \"detail\": ").append(quote(detail)).append("}");
        }
        System.out.println(out.append("}}"));
    }
}
