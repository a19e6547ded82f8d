// What an analyst's JDBC tool (DBeaver, DataGrip) does against gpusched's store: connect
// with the ClickHouse JDBC driver, read the tables' metadata, SELECT from telemetry and
// job_events. Run by tests/integration/test_clickhouse_http.py as a single-file program:
//   java -cp '<driver jars>/*' JdbcProbe.java <jdbc url> <user> <password>
// It prints one "key=value" line per fact for the test to check.

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.Properties;
import java.util.TreeSet;

public class JdbcProbe {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        try (Connection conn = DriverManager.getConnection(args[0], props)) {
            DatabaseMetaData meta = conn.getMetaData();
            System.out.println("product=" + meta.getDatabaseProductName());
            TreeSet<String> tables = new TreeSet<>();
            try (ResultSet rs = meta.getTables(null, "gpusched", "%", null)) {
                while (rs.next()) {
                    tables.add(rs.getString("TABLE_NAME"));
                }
            }
            System.out.println("tables=" + String.join(",", tables));
            TreeSet<String> columns = new TreeSet<>();
            try (ResultSet rs = meta.getColumns(null, "gpusched", "job_events", "%")) {
                while (rs.next()) {
                    columns.add(rs.getString("COLUMN_NAME"));
                }
            }
            System.out.println("job_events_columns=" + String.join(",", columns));
            try (Statement st = conn.createStatement()) {
                try (ResultSet rs = st.executeQuery(
                        "SELECT count(), uniqExact(node_id), sum(power_w) > 0 FROM telemetry")) {
                    rs.next();
                    System.out.println("telemetry_rows=" + rs.getLong(1));
                    System.out.println("telemetry_nodes=" + rs.getLong(2));
                    System.out.println("telemetry_power=" + rs.getBoolean(3));
                }
                try (ResultSet rs = st.executeQuery(
                        "SELECT job_id, tenant FROM job_events ORDER BY job_id")) {
                    StringBuilder jobs = new StringBuilder();
                    while (rs.next()) {
                        jobs.append(rs.getString("job_id")).append(':')
                            .append(rs.getString("tenant")).append(' ');
                    }
                    System.out.println("jobs=" + jobs.toString().trim());
                    System.out.println("column_type="
                        + rs.getMetaData().getColumnTypeName(1));
                }
            }
        }
    }
}
