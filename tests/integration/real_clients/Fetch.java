// Fetch: GET each URL with the JVM's HttpsURLConnection (proxy from the -Dhttps.proxyHost properties, roots from
// javax.net.ssl.trustStore or cacerts) and print one line per URL: "<url> ok <status> <body>" or "<url> error <e>".
import java.io.InputStream;
import java.net.HttpURLConnection;
import java.net.URI;
import java.nio.charset.StandardCharsets;

public class Fetch {
    public static void main(String[] args) {
        for (String url : args) {
            try {
                HttpURLConnection conn = (HttpURLConnection) URI.create(url).toURL().openConnection();
                conn.setConnectTimeout(10000);
                conn.setReadTimeout(10000);
                int status = conn.getResponseCode();
                try (InputStream in = conn.getInputStream()) {
                    String body = new String(in.readAllBytes(), StandardCharsets.UTF_8).trim();
                    System.out.println(url + " ok " + status + " " + body);
                }
            } catch (Exception e) {
                System.out.println(url + " error " + e.getClass().getName() + ": " + e.getMessage());
            }
        }
    }
}
